# PyTorch through the shim (GPU tier): elementwise kernels, a cuBLAS matmul and a small
# training step. Prints values rounded so that the tier can compare the run through the
# shim with the native one; exits non-zero on any CUDA error.
import torch

torch.manual_seed(0)
x = torch.randn(1024, 1024, device="cuda")
print("elementwise", round((x * 2 + 1).sum().item(), 1))
print("matmul", round((x @ x).sum().item(), 0))
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(512, 256, device="cuda")
target = torch.randint(0, 10, (512,), device="cuda")
for _ in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(data), target)
    loss.backward()
    opt.step()
print("loss after 20 steps", round(loss.item(), 3))
torch.cuda.synchronize()
print("PASS pytorch")
