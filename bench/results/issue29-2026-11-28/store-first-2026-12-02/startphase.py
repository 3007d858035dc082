import time
T0 = time.monotonic()
import sys
import torch
t_import = time.monotonic()
torch.cuda.init()
t_init = time.monotonic()
nn = torch.nn
net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
                    nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda().eval()
x = torch.randn(8, 3, 32, 32, device="cuda")
t_net = time.monotonic()
with torch.inference_mode():
    net(x).sum().item()
t_step = time.monotonic()
print("phase %.3f %.3f %.3f %.3f" % (t_import - T0, t_init - t_import, t_net - t_init, t_step - t_net), flush=True)
