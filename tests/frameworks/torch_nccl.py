# NCCL through PyTorch in one process (world size 1: NCCL refuses two ranks on one GPU,
# natively too): a communicator made with the VMM and IPC-capable allocations NCCL uses by
# default, then every collective on tensors of several sizes and types, and a collective
# captured in a CUDA graph and replayed. Prints sums (exact: integers, or floats of small
# integers).
import os
import socket

import torch
import torch.distributed as dist

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ["MASTER_PORT"] = str(port)
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))

for n, dtype in ((1, torch.float32), (4097, torch.float16), (1 << 20, torch.int32)):
    x = (torch.arange(n, device="cuda") % 7).to(dtype)
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
    out = [torch.empty_like(x)]
    dist.all_gather(out, x)
    rs = torch.empty_like(x)
    dist.reduce_scatter(rs, [x])
    torch.cuda.synchronize()
    print("collectives", n, str(dtype).split(".")[1], int(out[0].double().sum().item()),
          int(rs.double().sum().item()))

# A collective in a captured graph (NCCL registers its buffers for it), replayed 3 times.
y = torch.ones(1 << 16, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    dist.all_reduce(y)  # warm-up outside the capture
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    dist.all_reduce(y)
    y.mul_(2)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
print("captured all_reduce then x2, 3 replays: sum", int(y.sum().item()))
dist.destroy_process_group()
print("PASS torch_nccl")
