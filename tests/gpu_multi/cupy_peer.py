# CuPy over two GPUs of one process: peer access asked and enabled, a peer copy of 64 MiB each
# way, a raw kernel on device 1 reading device 0's memory directly, and a peer copy on a
# stream of device 1. Skips (77) with fewer than two GPUs.
import sys

import cupy as cp

n = cp.cuda.runtime.getDeviceCount()
if n < 2:
    print(f"needs two GPUs, found {n}")
    sys.exit(77)
print("can access", cp.cuda.runtime.deviceCanAccessPeer(0, 1), cp.cuda.runtime.deviceCanAccessPeer(1, 0))
N = 16 << 20
with cp.cuda.Device(0):
    a = cp.arange(N, dtype=cp.float32)
    cp.cuda.runtime.deviceEnablePeerAccess(1)
with cp.cuda.Device(1):
    cp.cuda.runtime.deviceEnablePeerAccess(0)
    b = cp.empty(N, dtype=cp.float32)
    b.data.copy_from_device(a.data, a.nbytes)  # peer copy, device 0 -> 1
    print("to 1", float(b[N - 1]), float(b.sum()))
    add = cp.RawKernel(r'''
extern "C" __global__ void add(const float *far, float *near, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) near[i] += 2.0f * far[i];
}''', "add")
    add(((N + 255) // 256,), (256,), (a, b, cp.int32(N)))  # a lies on device 0
    print("kernel reading device 0", float(b[12345]), float(b.sum()))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        c = cp.empty_like(b)
        c.data.copy_from_device_async(b.data, b.nbytes, stream=s)
    s.synchronize()
with cp.cuda.Device(0):
    back = cp.empty(N, dtype=cp.float32)
    back.data.copy_from_device(c.data, c.nbytes)  # device 1 -> 0
    print("back on 0", float(back[7]), float(back.sum()))
print("PASS cupy_peer")
