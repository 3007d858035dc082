# CuPy's libraries one by one, each printed on its own so that a failure names its library:
# cuBLAS (matmul, fp16 and fp64 too), cuFFT, cuSOLVER, cuRAND, cuSPARSE, NVRTC (RawKernel).
import cupy as cp
import numpy as np

def step(name, fn):
    try:
        print(name, fn())
    except Exception as e:  # the rest still runs; the output differs from native
        print(name, "ERROR", type(e).__name__, str(e).splitlines()[0][:120])

rng = np.random.default_rng(0)
a64 = rng.standard_normal((64, 64))
step("cublas sgemm", lambda: round(float((cp.asarray(a64, cp.float32) @ cp.asarray(a64, cp.float32)).sum()), 2))
step("cublas dgemm", lambda: round(float((cp.asarray(a64) @ cp.asarray(a64)).sum()), 6))
step("cublas hgemm", lambda: round(float((cp.asarray(a64, cp.float16) @ cp.asarray(a64, cp.float16)).astype(cp.float32).sum()), 0))
step("cublas dot", lambda: round(float(cp.dot(cp.arange(100.0), cp.arange(100.0))), 1))
step("cufft", lambda: round(float(cp.abs(cp.fft.fft(cp.asarray(a64[0]))).sum()), 6))
step("cufft 2d", lambda: round(float(cp.abs(cp.fft.rfft2(cp.asarray(a64))).sum()), 4))
spd = a64 @ a64.T + 64 * np.eye(64)
step("cusolver solve", lambda: round(float(cp.linalg.solve(cp.asarray(spd), cp.ones(64)).sum()), 8))
step("cusolver cholesky", lambda: round(float(cp.linalg.cholesky(cp.asarray(spd)).trace()), 6))
step("cusolver svd", lambda: [round(float(v), 5) for v in cp.linalg.svd(cp.asarray(a64), compute_uv=False)[:3]])
step("cusolver eigh", lambda: round(float(cp.linalg.eigh(cp.asarray(spd))[0].sum()), 4))
def rand():
    g = cp.random.default_rng(1)
    return round(float(g.standard_normal(1 << 16).mean()), 6)
step("curand", rand)
def sparse():
    import cupyx.scipy.sparse as sp
    m = sp.random(200, 200, density=0.05, format="csr", dtype=cp.float64, random_state=3)
    return round(float((m @ cp.ones(200)).sum()), 6)
step("cusparse spmv", sparse)
def nvrtc():
    k = cp.RawKernel(r'''
    extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] += a * x[i];
    }''', "axpy")
    x = cp.arange(4096, dtype=cp.float32)
    y = cp.ones(4096, dtype=cp.float32)
    k((16,), (256,), (cp.float32(0.5), x, y, cp.int32(4096)))
    return float(y.sum())
step("nvrtc rawkernel", nvrtc)
step("elementwise kernel", lambda: float(cp.ElementwiseKernel("float32 x", "float32 y", "y = x * x + 1", "sq1")(cp.arange(100, dtype=cp.float32)).sum()))
step("reduction kernel", lambda: float(cp.ReductionKernel("float32 x", "float32 y", "x", "a + b", "y = a", "0", "sum1")(cp.arange(1000, dtype=cp.float32))))
print("PASS cupy_libs")
