# One PyTorch process using two GPUs apart (a model per GPU, no tensor crossing between them),
# through the shim with MPSSHIM_SERVER_PER_GPU=1 and MPSSHIM_SERVER_PER_GPU_MOVE=1: the
# process moves to device 0's server at its first context and connects to device 1's server
# at its second (interpose/route.c), so each device's work runs in its own GPU's server and a
# fault on one would end its work there alone. cuBLAS and cuDNN are loaded by each server from
# the images the shim keeps (interpose/replicas.c). Natively the settings mean nothing.
# Every value is computed on each GPU from CPU inputs and brought back to the CPU. Then a
# CUDA graph per GPU (torch.cuda.graph), replayed, and destroyed with the other GPU current:
# each graph lives in its GPU's server (interpose/owned.c).
import gc
import os
import sys

if os.environ.get("MPSSHIM_SERVER_PER_GPU_MOVE") != "1":
    # The shim reads its settings at the process's start: set them and start again.
    os.environ["MPSSHIM_SERVER_PER_GPU"] = "1"
    os.environ["MPSSHIM_SERVER_PER_GPU_MOVE"] = "1"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import threading  # noqa: E402

import torch  # noqa: E402

if torch.cuda.device_count() < 2:
    print("needs two GPUs")
    sys.exit(77)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False


def prepare(dev):
    """Inputs and a model on dev, from CPU values seeded alike for each device."""
    torch.manual_seed(7)
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 16 * 16, 10),
    )
    x = torch.randn(32, 3, 16, 16)
    y = torch.randint(0, 10, (32,))
    a = torch.randn(256, 256)
    return m.to(dev), x.to(dev), y.to(dev), a.to(dev)


def work(dev, prep, out):
    m, xs, ys, a = prep
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    losses = []
    s = torch.cuda.Stream(device=dev)
    with torch.cuda.device(dev), torch.cuda.stream(s):
        for _ in range(5):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(xs), ys)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        mm = (a @ a.T).softmax(dim=1).sum(dim=0)
        e = torch.cuda.Event()
        e.record(s)
    e.synchronize()
    out[str(dev)] = (
        [round(v, 4) for v in losses],
        round(mm.cpu().double().sum().item(), 3),
        round(sum(p.detach().cpu().double().sum().item() for p in m.parameters()), 4),
    )


DEVS = [torch.device(d) for d in ("cuda:0", "cuda:1")]
out = {}
for dev in DEVS:
    work(dev, prepare(dev), out)
for dev in ("cuda:0", "cuda:1"):
    print(dev, "losses", out[dev][0], "mm", out[dev][1], "params", out[dev][2])
# Both devices at once, a thread each.
both = {}
preps = [prepare(dev) for dev in DEVS]
ts = [threading.Thread(target=work, args=(dev, prep, both)) for dev, prep in zip(DEVS, preps)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("threads agree:", both == out)
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
print("memory on each device:", [torch.cuda.memory_allocated(d) > 0 for d in (0, 1)])


def graphed(dev):
    """A small model's forward captured as a CUDA graph on dev, replayed on three inputs."""
    torch.cuda.set_device(dev)
    torch.manual_seed(3)
    lin = torch.nn.Linear(64, 64).to(dev)
    static_in = torch.zeros(16, 64, device=dev)
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(2):
            lin(static_in)
    torch.cuda.current_stream(dev).wait_stream(side)
    g = torch.cuda.CUDAGraph()
    # Its own stream: torch.cuda.graph's default capture stream is made once, on the first
    # device it was used with.
    with torch.cuda.graph(g, stream=side):
        static_out = lin(static_in).relu().sum(dim=1)
    outs = []
    for k in range(3):
        static_in.copy_(torch.full((16, 64), float(k + 1)).to(dev))
        g.replay()
        outs.append(round(static_out.sum().item(), 3))
    return g, outs


graphs = []
for dev in DEVS:
    g, outs = graphed(dev)
    graphs.append(g)
    print(dev, "graph replays", outs)
torch.cuda.set_device(1)  # device 0's graph goes with device 1 current, and the other way round
del graphs[0]
gc.collect()
torch.cuda.set_device(0)
del graphs[0]
gc.collect()
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
print("graphs destroyed with the other device current")
