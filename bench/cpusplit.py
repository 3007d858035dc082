#!/usr/bin/env python3
"""cpusplit.py: where a fleet's CPU goes, per step.

usage: bench/cpusplit.py BUILD MODE P [VAR=VAL...] [--seconds T] [--prof DIR] [--fake]
                        [--program fleet|fleetc] [--fleetc-args "ARGS"]

P bench/fleet.py processes (or, with --program fleetc, P bench/fleetc processes, the same
fleet without Python: BUILD/bench/fleetc with --fleetc-args, by default bench/run.sh's
"--work-us 100 --launches 8") at once under MODE (native, mps: NVIDIA's MPS, mpsshim: BUILD's
server and shim), each with a private pipe and log directory; VAR=VAL... in every process's
environment (the server's too). Over 2 s in the middle of their common window it reads
/proc: the CPU time of the CPUs it may run on (busy, idle, user, system; the machine's
unless taskset held it to fewer), each thread's CPU time and context
switches (clients' main threads and other threads; the daemon's threads grouped by name, a
worker of the server being `worker`), the interrupts that cost CPUs (RES, CAL, TLB, LOC); and
prints each per step of the fleet (its steps/s times the 2 s). Under MPS the clients' CPU is
all of it: the MPS server does no work per call. Through mpsshim a step's CPU is the
client's and its worker's, so the two together against MPS's client is the comparison.

--prof DIR: tools/libprofsample.so preloaded into the clients and the daemon (mpsshim's or
MPS's control daemon, whose server inherits it), their samples into DIR, then
tools/profsum.py DIR (where each process's CPU went, by library and function, with the
callers of its locks and waits). --fake: fleet.py --fake (no PyTorch, no GPU: tests the
plumbing only, its figures mean nothing).

The figures in bench/results/issue29-2026-11-28/cpu-2026-11-29/ come from it."""
import argparse
import collections
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf('SC_CLK_TCK')
IRQS = ('RES', 'CAL', 'TLB', 'LOC')


def thread_stat(path):
    """(comm, CPU ticks, voluntary and involuntary switches) of /proc/P/task/T, or None."""
    try:
        with open(path + '/stat') as f:
            st = f.read()
        with open(path + '/comm') as f:
            comm = f.read().strip()
        with open(path + '/status') as f:
            status = f.read().splitlines()
    except OSError:
        return None  # the thread ended between the listing and the reads
    fields = st[st.rindex(')') + 2:].split()
    vol = invol = 0
    for line in status:
        if line.startswith('voluntary_ctxt_switches'):
            vol = int(line.split()[1])
        elif line.startswith('nonvoluntary_ctxt_switches'):
            invol = int(line.split()[1])
    return comm, int(fields[11]) + int(fields[12]), vol, invol


def snapshot(clients, daemon):
    """The machine's CPU counters, interrupts, and per group [ticks, vol, invol, threads]."""
    groups = collections.defaultdict(lambda: [0, 0, 0, 0])

    def add(key, r):
        g = groups[key]
        g[0] += r[1]
        g[1] += r[2]
        g[2] += r[3]
        g[3] += 1

    for pid in clients:
        for t in glob.glob('/proc/%d/task/*' % pid):
            r = thread_stat(t)
            if r:
                add('client main' if t.endswith('/%d' % pid) else 'client other', r)
    for pid in daemon:
        for t in glob.glob('/proc/%d/task/*' % pid):
            r = thread_stat(t)
            if r:
                add('daemon ' + ('worker' if r[0].startswith('client ') else r[0]), r)
    # The CPUs this process may run on (taskset): the fleet's, when the machine has more.
    mine = {'cpu%d' % c for c in os.sched_getaffinity(0)}
    cpu = [0] * 10
    with open('/proc/stat') as f:
        for line in f:
            w = line.split()
            if w and w[0] in mine:
                cpu = [x + int(v) for x, v in zip(cpu, w[1:11] + ['0'] * 10)]
    irq = collections.Counter()
    with open('/proc/interrupts') as f:
        for line in f:
            w = line.split()
            if w and w[0].rstrip(':') in IRQS:
                irq[w[0].rstrip(':')] = sum(int(v) for v in w[1:] if v.isdigit())
    return cpu, irq, groups


def started(name):
    """Whether the process writing `name` has begun its first window."""
    try:
        with open(name, errors='replace') as f:
            return any(line.startswith('# window_start_s ') for line in f)
    except OSError:
        return False


def daemon_pids(stop):
    """The server's pid(s), as its control daemon's get_server_list gives them (ours: the
    private pipe directory names it); none in native mode."""
    if not stop:
        return []
    r = subprocess.run(stop[0], input='get_server_list\n', env=stop[1], capture_output=True,
                       text=True, timeout=20)
    return [int(w) for w in r.stdout.split() if w.isdigit()]


# The counters of seqgraph.c's line at a client's exit, in its order: the whole run of each
# client (warm-up included), summed over the clients.
SEQ_COUNTS = ('replays', 'launches replayed', 'graphs made', 'runs new', 'nodes updated',
              'replays with too many updates', 'barred', 'runs cut', 'runs of one launch',
              'runs too long', 'runs ended by attributes', None, 'holds let go unmatched',
              'by their grace', 'by another record', 'held back by the gap rule')


def seq_totals(lines):
    """One line: seqgraph's counters summed over its clients' exit lines, and nodes updated
    per replay (whether a replay costs the driver about one launch or twelve)."""
    tot = collections.Counter()
    for line in lines:
        words = [w.strip(',;()') for w in line.split(':', 1)[1].split()]
        nums = [int(w, 0) if w.startswith('0x') else int(w) for w in words
                if w.isdigit() or (w.startswith('0x') and len(w) > 2)]  # ids: %#llx
        for k, v in zip(SEQ_COUNTS, nums):
            if k:
                tot[k] += v
    per = tot['nodes updated'] / tot['replays'] if tot['replays'] else 0.0
    return 'totals: ' + ', '.join('%s %d' % (k, tot[k]) for k in SEQ_COUNTS if k) + (
        '; nodes updated per replay %.2f' % per)


def main():
    ap = argparse.ArgumentParser(description='where a fleet\'s CPU goes, per step')
    ap.add_argument('build')
    ap.add_argument('mode', choices=('native', 'mps', 'mpsshim'))
    ap.add_argument('procs', type=int)
    ap.add_argument('vars', nargs='*', help='VAR=VAL for every process')
    ap.add_argument('--seconds', type=float, default=4.0, help="fleet.py's window")
    ap.add_argument('--prof', help='profile into this directory (tools/libprofsample.so)')
    ap.add_argument('--fake', action='store_true')
    ap.add_argument('--program', choices=('fleet', 'fleetc'), default='fleet')
    ap.add_argument('--fleetc-args', default='--work-us 100 --launches 8')
    a = ap.parse_intermixed_args()
    build = os.path.abspath(a.build)
    if a.seconds < 3:
        ap.error('--seconds: at least 3 (the counters are read over 2 s inside the window)')
    env = dict(os.environ)
    for v in a.vars:
        if '=' not in v:
            ap.error('%s: not VAR=VAL' % v)
        k, val = v.split('=', 1)
        env[k] = val
    work = tempfile.mkdtemp(prefix='cpusplit.')
    prof_lib = os.path.join(build, 'tools', 'libprofsample.so')
    daemon_env = dict(env)
    if a.prof:
        os.makedirs(a.prof, exist_ok=True)
        if not os.path.exists(prof_lib):
            sys.exit('cpusplit: no %s (make builds it)' % prof_lib)
        daemon_env['PROFSAMPLE_DIR'] = os.path.abspath(a.prof)
        daemon_env['LD_PRELOAD'] = prof_lib
    client_env = dict(daemon_env)
    preload = []
    stop = None
    if a.mode == 'mps':
        for k, sub in (('CUDA_MPS_PIPE_DIRECTORY', 'mps-pipe'), ('CUDA_MPS_LOG_DIRECTORY',
                                                                 'mps-log')):
            os.makedirs(os.path.join(work, sub))
            daemon_env[k] = client_env[k] = os.path.join(work, sub)
        subprocess.run(['nvidia-cuda-mps-control', '-d'], env=daemon_env, check=True)
        stop = (['nvidia-cuda-mps-control'], daemon_env)
        time.sleep(1)
    elif a.mode == 'mpsshim':
        for k, sub in (('MPSSHIM_PIPE_DIRECTORY', 'pipe'), ('MPSSHIM_LOG_DIRECTORY', 'log')):
            os.makedirs(os.path.join(work, sub), mode=0o700)
            daemon_env[k] = client_env[k] = os.path.join(work, sub)
        ctl = os.path.join(build, 'mpsshim-control')
        subprocess.run([ctl, '-d'], env=daemon_env, check=True)
        stop = ([ctl], daemon_env)
        preload.append(os.path.join(build, 'libmpsshim.so'))
    if a.prof:
        preload.append(prof_lib)
    if preload:
        client_env['LD_PRELOAD'] = ':'.join(preload)
    else:
        client_env.pop('LD_PRELOAD', None)
    barrier = os.path.join(work, 'barrier')
    os.makedirs(barrier)
    clients = []
    outs = []
    try:
        for i in range(a.procs):
            out = open(os.path.join(work, 'out.%d' % i), 'w')
            outs.append(out.name)
            if a.program == 'fleetc':
                cmd = [os.path.join(build, 'bench', 'fleetc'), '--procs', str(a.procs),
                       '--barrier', os.path.join(barrier, 'file'), '--seconds',
                       str(a.seconds)] + a.fleetc_args.split()
            else:
                cmd = [sys.executable, os.path.join(ROOT, 'bench', 'fleet.py'), '--procs',
                       str(a.procs), '--index', str(i), '--barrier', barrier, '--seconds',
                       str(a.seconds)] + (['--fake'] if a.fake else [])
            clients.append(subprocess.Popen(cmd, env=client_env, stdout=out,
                                            stderr=subprocess.STDOUT))
            out.close()
        # Every process's window has started (each says so: `# window_start_s T 1`).
        give_up = time.monotonic() + 300
        while sum(1 for name in outs if started(name)) < a.procs:
            if time.monotonic() > give_up or any(c.poll() not in (None, 0) for c in clients):
                sys.exit('cpusplit: the fleet did not reach its window (see %s)' % work)
            time.sleep(0.01)
        # Into the window (its first 0.5 s has the processes' first steps), then 2 s.
        time.sleep(min(0.5, a.seconds - 2.5))
        pids = [c.pid for c in clients]
        dpids = daemon_pids(stop)
        before = snapshot(pids, dpids)
        t0 = time.monotonic()
        time.sleep(2)
        after = snapshot(pids, dpids)
        dt = time.monotonic() - t0
        for c in clients:
            c.wait(timeout=120)
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
        if stop:
            subprocess.run(stop[0], input=b'quit\n', env=stop[1])
            time.sleep(0.5)
    # The 2 s read must lie inside every process's window (`# window_s T0 T1`).
    for name in outs:
        with open(name, errors='replace') as f:
            for line in f:
                w = line.split()
                if len(w) >= 4 and w[:2] == ['#', 'window_s'] and float(w[3]) < t0 + dt:
                    print('cpusplit: warning: a window ended before the read did (%s)' % name)
    rate = 0.0
    for name in outs:
        with open(name, errors='replace') as f:
            for line in f:
                w = line.split()
                if len(w) > 2 and w[0] == 'metric' and w[1] == 'steps_per_s':
                    rate += float(w[2])
    if rate <= 0:
        sys.exit('cpusplit: no steps/s from the fleet (see %s)' % work)
    steps = rate * dt

    def us(ticks):
        return ticks / HZ * 1e6 / steps

    cpu = [y - x for x, y in zip(before[0], after[0])]
    busy_all = sum(cpu[:8])
    idle = cpu[3] + cpu[4]
    label = ' '.join([a.mode, ('P=%d' if a.program == 'fleet' else 'fleetc P=%d') % a.procs] +
                     a.vars)
    print('%s: %.0f steps/s; per step: CPUs busy %.0f us (user %.0f, system %.0f), idle %.0f us;'
          ' its CPUs %.0f%% busy' % (label, rate, us(busy_all - idle), us(cpu[0] + cpu[1]),
                                         us(cpu[2] + cpu[5] + cpu[6]), us(idle),
                                         100.0 * (busy_all - idle) / max(busy_all, 1)))
    print('  interrupts per step: ' + ', '.join(
        '%s %.2f' % (k, (after[1][k] - before[1][k]) / steps) for k in IRQS))
    g0, g1 = before[2], after[2]
    for k in sorted(g1, key=lambda k: -(g1[k][0] - g0.get(k, [0] * 4)[0])):
        x, y = g0.get(k, [0, 0, 0, 0]), g1[k]
        if y[0] == x[0] and y[2] == x[2]:
            continue
        print('  %-24s %4d threads  CPU %7.1f us  switches: voluntary %5.2f, involuntary %5.2f'
              % (k, y[3], us(y[0] - x[0]), (y[1] - x[1]) / steps, (y[2] - x[2]) / steps))
    if a.mode == 'mpsshim':
        for f in glob.glob(os.path.join(work, 'log', '*.log')):
            with open(f, errors='replace') as fh:
                seqs = [line for line in fh if 'launch sequences replayed' in line]
            if seqs:
                print('  launch sequences: %d clients said; replayed as graphs by %d' % (
                    len(seqs), sum(1 for s in seqs if ': 0 launch sequences' not in s)))
                print('  ' + seq_totals(seqs))
    if a.prof:
        for name in outs:
            shutil.copy(name, a.prof)
        subprocess.run([sys.executable, os.path.join(ROOT, 'tools', 'profsum.py'), a.prof])
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
