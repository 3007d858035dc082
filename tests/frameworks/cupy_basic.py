# CuPy: elementwise, reductions, a matmul (cuBLAS), an FFT (cuFFT), a RawKernel (NVRTC).
import cupy as cp

a = cp.arange(1 << 20, dtype=cp.float32) / (1 << 20)
print("elementwise sum", round(float((a * 2 + 1).sum()), 1))
print("reduction max", round(float(cp.max(cp.sin(a))), 4))
m = cp.ones((256, 256), dtype=cp.float32) * 0.5
print("matmul sum", round(float((m @ m).sum()), 1))
f = cp.fft.fft(cp.ones(1024, dtype=cp.complex64))
print("fft[0]", round(float(f[0].real), 1))
k = cp.RawKernel(r'''
extern "C" __global__ void twice(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}''', "twice")
b = cp.ones(1000, dtype=cp.float32)
k((4,), (256,), (b, cp.int32(1000)))
print("rawkernel sum", float(b.sum()))
print("PASS cupy_basic")
