# PyTorch CUDA graphs with the cudaMallocAsync allocator backend: the allocations made while
# capturing become graph memory nodes (cuMemAllocAsync/cuMemFreeAsync captured on the
# stream). A captured training step (forward, backward, SGD) replayed on new batches, and
# make_graphed_callables on a small module; sums printed rounded so that native and shim
# runs compare exactly.
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
import torch  # noqa: E402

assert torch.cuda.get_allocator_backend() == "cudaMallocAsync", torch.cuda.get_allocator_backend()
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False

net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.01)
loss_fn = torch.nn.MSELoss()
static_x = torch.randn(32, 64, device="cuda")
static_y = torch.randn(32, 8, device="cuda")

# Warm-up on a side stream, as the PyTorch documentation asks before capturing.
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(net(static_x), static_y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(s)

g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    static_loss = loss_fn(net(static_x), static_y)
    static_loss.backward()
    opt.step()

gen = torch.Generator(device="cuda").manual_seed(1)
losses = []
for i in range(10):
    static_x.copy_(torch.randn(32, 64, device="cuda", generator=gen))
    static_y.copy_(torch.randn(32, 8, device="cuda", generator=gen))
    g.replay()
    losses.append(static_loss.item())
print("captured step replayed: losses", [round(v, 3) for v in losses])

mod = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()).cuda()
sample = torch.randn(8, 16, device="cuda", requires_grad=True)
graphed = torch.cuda.make_graphed_callables(mod, (sample,))
total = 0.0
for i in range(5):
    x = torch.full((8, 16), 0.1 * i, device="cuda", requires_grad=True)
    out = graphed(x)
    out.sum().backward()
    total += out.sum().item() + x.grad.sum().item()
print("make_graphed_callables: total", round(total, 3))
del g
torch.cuda.synchronize()
torch.cuda.empty_cache()
print("PASS torch_graphs_async")
