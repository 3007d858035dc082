# PyTorch CUDA graphs: a captured forward pass replayed on new inputs.
import torch

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
static_in = torch.randn(32, 64, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        net(static_in)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_out = net(static_in)
total = 0.0
for i in range(5):
    static_in.copy_(torch.full((32, 64), 0.01 * i, device="cuda"))
    g.replay()
    total += static_out.sum().item()
print("replayed sum", round(total, 3))
print("PASS torch_graphs")
