// A second module for multi-module tests: one kernel whose name exists nowhere else, and
// one that shares its name with a kernel of kernels.cu but computes something different.
// CPU twins: tests/cpudrv/twins.c (module is told apart by the kernels it declares).

extern "C" __global__ void negate_i32(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = -p[i];
}
