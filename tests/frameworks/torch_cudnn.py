# PyTorch: a small conv + linear net trained with SGD, cuDNN at its default settings
# (benchmark off, non-deterministic algorithms allowed). Prints the loss, rounded.
import torch

torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(32, 10)).cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.05)
x = torch.randn(64, 3, 32, 32, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
for _ in range(30):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 2))
print("PASS torch_cudnn")
