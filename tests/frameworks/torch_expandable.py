# PyTorch with expandable segments (its caching allocator on cuMemCreate, reserved address
# ranges and cuMemMap): growing and shrinking tensors, a training step, empty_cache.
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import torch

torch.manual_seed(0)
total = 0.0
keep = []
for i in range(12):
    t = torch.full((1 << (14 + i % 6),), float(i), device="cuda")
    total += t.sum().item()
    if i % 3 == 0:
        keep.append(t)
print("sum", total)
net = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)).cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(256, 128, device="cuda")
for _ in range(10):
    opt.zero_grad()
    loss = net(x).pow(2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
del keep
torch.cuda.empty_cache()
print("reserved after empty_cache <= 64 MiB", torch.cuda.memory_reserved() <= 64 << 20)
print("PASS torch_expandable")
