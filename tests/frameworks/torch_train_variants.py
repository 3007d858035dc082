# PyTorch training variants one by one (each on its own line, so a failure names it): fused
# and foreach AdamW in fp32, the cudaMallocAsync allocator in a child process, several
# streams, torch.compile default and reduce-overhead (CUDA graphs inside), an NCCL all-reduce
# in one process over one GPU. Losses rounded to 3 digits (TF32 off: deterministic enough).
import os, subprocess, sys, warnings
import torch

# Inductor warns about TF32 when it compiles, not when its cache serves the second run.
warnings.simplefilter("ignore")

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

def step(name, fn):
    try:
        print(name, fn())
    except Exception as e:
        print(name, "ERROR", type(e).__name__, str(e).splitlines()[0][:160])
    sys.stdout.flush()

def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 4)).cuda()

def train(opt_kw, model=None, steps=15):
    m = model or net()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, **opt_kw)
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(128, 64, device="cuda", generator=g)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
    return round(loss.item(), 3)

step("adamw fused", lambda: train({"fused": True}))
step("adamw foreach", lambda: train({"foreach": True}))

def streams():
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    with torch.cuda.stream(s1):
        b = a * 2
    with torch.cuda.stream(s2):
        c = a + 1
    torch.cuda.synchronize()
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    ev.synchronize()
    return float((b + c).sum().item())
step("streams", streams)

def compiled(mode):
    m = net()
    f = torch.compile(m, mode=mode)
    x = torch.randn(128, 64, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    out = None
    for _ in range(4):
        out = f(x)
    torch.cuda.synchronize()
    return round(float(out.sum().item()), 3)
step("compile default", lambda: compiled("default"))
step("compile reduce-overhead", lambda: compiled("reduce-overhead"))

def malloc_async():
    code = ("import torch; x = torch.ones(1 << 20, device='cuda'); y = x * 3; "
            "del x; print(round(float(y.sum().item()), 1), torch.cuda.get_allocator_backend())")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    return r.stdout.strip() if r.returncode == 0 else "ERROR exit %d %s" % (r.returncode, r.stderr.strip().splitlines()[-1:])
step("cudaMallocAsync", malloc_async)

def nccl():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1)
    t = torch.arange(8, device="cuda", dtype=torch.float32)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return float(t.sum().item())
step("nccl all_reduce", nccl)
print("PASS torch_train_variants")
