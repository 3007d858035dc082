#!/usr/bin/env python3
"""fleet.py: one process of the inference-fleet figure of bench/run.sh.

A small conv net (3 conv layers, a linear layer: about 60 k parameters) in PyTorch, eval
mode, under torch.inference_mode, answers batches of 8 images of 3x32x32, one `.item()` per
step (the sync a serving loop does to hand a result back). After W warm-up steps the P
processes given the same barrier directory wait for each other, then each runs steps for T
seconds and prints `metric steps_per_s <steps/s> steps/s <repeat>`; R repeats, each started
at a barrier, in one process (PyTorch's start-up is paid once, as a server's is). The fleet's
figure is the sum over its processes of one repeat's steps/s: every process runs the same T
seconds, all at once. It also prints `metric start_s`: from its start (before PyTorch is
imported) to the result of its first step.

What the steps cost in CPU, per repeat: `metric cpu_us_per_step` (this process's CPU time
over its window, all its threads, per step), and from process 0 only `metric machine_cpus`
(the CPUs the whole machine kept busy on average over its window, from /proc/stat: the
clients, a server's threads, anything else). Through a server a step's work is split between
the client and the server's worker, so only the machine's CPU per step (bench/run.sh's
fleet_cpu_us: machine_cpus over the fleet's steps/s) compares with native or MPS, whose
clients do it all.

usage: fleet.py --procs P --index I --barrier DIR [--repeats R] [--seconds T] [--warmup W]
                [--batch B] [--fake]
--index: this process's number, 0..P-1, each a different one (the barrier counts them: P
processes all given 0 wait for each other until the barrier times out).
--fake: no PyTorch; each "step" sleeps 0.2 ms. Tests bench/run.sh's plumbing on a machine
without PyTorch and a GPU (MPSSHIM_BENCH_CPU=1); its numbers mean nothing.
"""
import time

T_START = time.monotonic()  # before anything is imported: start-up is a figure too

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def barrier(directory, round_no, procs, index, timeout):
    """Waits until `procs` processes have arrived at round `round_no` of `directory`."""
    prefix = "arrive.%d." % round_no
    open(os.path.join(directory, prefix + str(index)), "w").close()
    give_up = time.monotonic() + timeout
    while sum(1 for n in os.listdir(directory) if n.startswith(prefix)) < procs:
        if time.monotonic() > give_up:
            print("FAIL fleet: barrier %d: timed out after %d s" % (round_no, timeout), flush=True)
            sys.exit(1)
        time.sleep(0.0005)


def machine_busy_s():
    """CPU-seconds the machine's CPUs have spent busy since boot (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal: idle and iowait are not busy
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def make_step(batch, fake):
    """The function one step calls, and a line saying what it runs on."""
    if fake:
        return (lambda: time.sleep(0.0002)), "fake steps (sleep 0.2 ms), no PyTorch"
    import torch

    if not torch.cuda.is_available():
        print("FAIL fleet: torch.cuda.is_available() is False", flush=True)
        sys.exit(1)
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda().eval()
    x = torch.randn(batch, 3, 32, 32, device="cuda")

    def step():
        with torch.inference_mode():
            return net(x).sum().item()

    return step, "torch %s, %s" % (torch.__version__, torch.cuda.get_device_name(0))


def main():
    ap = argparse.ArgumentParser(description="one process of the inference fleet")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--index", type=int, default=0, help="this process's number, 0..P-1")
    ap.add_argument("--barrier", help="a directory, new and the same for the P processes")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--fake", action="store_true")
    a = ap.parse_args()
    if a.procs > 1 and not a.barrier:
        ap.error("--procs > 1 needs --barrier")

    step, what = make_step(a.batch, a.fake)
    step()
    first = time.monotonic() - T_START
    for _ in range(a.warmup):
        step()
    print("# fleet: pid %d, process %d of %d, batch %d, %s" % (os.getpid(), a.index, a.procs,
                                                            a.batch, what))
    print("metric start_s %.3f s" % first, flush=True)
    for r in range(1, a.repeats + 1):
        # The first meeting waits for the slowest start-up (16 PyTorch processes at once).
        if a.barrier:
            barrier(a.barrier, r, a.procs, a.index, 300 if r == 1 else 60)
        busy0 = machine_busy_s() if a.index == 0 else None
        c0 = time.process_time()
        t0 = time.monotonic()
        # When the window starts, for a tool reading the machine meanwhile (cpusplit.py).
        print("# window_start_s %.6f %d" % (t0, r), flush=True)
        end = t0 + a.seconds
        n = 0
        while True:
            step()
            n += 1
            t1 = time.monotonic()
            if t1 >= end:
                break
        c1 = time.process_time()
        busy1 = machine_busy_s() if busy0 is not None else None
        print("# window_s %.6f %.6f %d steps %d" % (t0, t1, r, n))
        print("metric steps_per_s %.1f steps/s %d" % (n / (t1 - t0), r))
        print("metric cpu_us_per_step %.2f us %d" % ((c1 - c0) * 1e6 / n, r))
        if busy1 is not None:
            print("metric machine_cpus %.3f cpus %d" % ((busy1 - busy0) / (t1 - t0), r))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
