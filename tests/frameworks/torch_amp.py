# PyTorch automatic mixed precision: bf16 autocast with fused AdamW, then fp16 autocast with
# GradScaler and foreach AdamW. Prints the losses, rounded (reduced precision: 2 digits).
import torch

torch.manual_seed(0)
def train(dtype, fused, scaler):
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                              torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=fused, foreach=not fused)
    x = torch.randn(512, 256, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    for _ in range(20):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    torch.cuda.synchronize()
    return round(loss.item(), 2)

print("bf16 fused AdamW loss", train(torch.bfloat16, True, None))
print("fp16 GradScaler foreach AdamW loss", train(torch.float16, False, torch.amp.GradScaler("cuda")))
print("PASS torch_amp")
