# PyTorch over two GPUs of one process, without NCCL ranks: nn.DataParallel training (the
# module broadcast to both GPUs at every step, the batch scattered, the outputs gathered and
# the gradients summed on GPU 0), torch.nn.parallel.comm's broadcast and reduce_add, and a stream of
# GPU 1 that waits for an event of GPU 0 before copying a tensor GPU 0 is still writing.
# Skips (77) with fewer than two GPUs.
import sys

import torch
from torch.nn.parallel import comm

n = torch.cuda.device_count()
if n < 2:
    print(f"needs two GPUs, found {n}")
    sys.exit(77)
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(8 * 16 * 16, 10)).cuda(0)
model = torch.nn.DataParallel(net, device_ids=[0, 1])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(32, 3, 16, 16, device="cuda:0")
y = torch.randint(0, 10, (32,), device="cuda:0")
for step in range(6):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print("dataparallel step", step, "loss %.6f" % loss.item())

a = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
copies = comm.broadcast(a, devices=[0, 1])
print("broadcast", [c.device.index for c in copies], float(copies[1][-1]), float(copies[1].sum()))
total = comm.reduce_add([copies[0], copies[1] * 2], destination=0)
print("reduce_add", total.device.index, float(total[12345]), float(total.sum()))

# GPU 0 fills a tensor after a long matmul chain; GPU 1's stream waits on GPU 0's event.
s0 = torch.cuda.Stream(device=0)
s1 = torch.cuda.Stream(device=1)
with torch.cuda.device(0), torch.cuda.stream(s0):
    m = torch.randn(2048, 2048, device="cuda:0")
    for _ in range(8):
        m = torch.tanh(m @ m)
    flag = torch.full((1 << 16,), 7.0, device="cuda:0") + m[0, 0] * 0
    ev = torch.cuda.Event()
    ev.record(s0)
with torch.cuda.device(1), torch.cuda.stream(s1):
    s1.wait_event(ev)
    got = flag.to("cuda:1", non_blocking=True)
    got_sum = got.sum()
s1.synchronize()
print("event across GPUs", got.device.index, float(got_sum))
print("PASS torch_dataparallel")
