# Triton (a kernel of its own) and numba-cuda when installed: each on its own line.
import sys

def step(name, fn):
    try:
        print(name, fn())
    except ModuleNotFoundError as e:
        print(name, "not installed", e.name)
    except Exception as e:
        print(name, "ERROR", type(e).__name__, str(e).splitlines()[0][:160])
    sys.stdout.flush()

def triton_add():
    import torch, triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    n = 10000
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    add[(triton.cdiv(n, 1024),)](x, x, out, n, BLOCK=1024)
    return float(out.sum().item())
step("triton add", triton_add)

def numba_kernel():
    from numba import cuda
    import numpy as np

    @cuda.jit
    def sq(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] * a[i]
    d = cuda.to_device(np.arange(1000, dtype=np.float32))
    sq[4, 256](d)
    return float(d.copy_to_host().sum())
step("numba kernel", numba_kernel)
print("PASS triton_numba")
