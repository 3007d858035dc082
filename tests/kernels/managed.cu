// Kernels on __managed__ variables: tests/progs/managed_vars.c (loads managed.fatbin as
// modules and a library) and tests/cudart/managed_vars.cu (includes this file). Behind the
// CPU test driver each kernel's CPU twin (tests/cpudrv/twins.c) finds the variables by name
// in the module it was launched from. Change both together.

#define MV_LEN 256

__managed__ int mv_count;                // bumped by mv_add
__managed__ unsigned int mv_arr[MV_LEN]; // element i bumped by v + i by mv_add
__managed__ int mv_init = 1234;          // its initial value comes from the image
__device__ int mv_plain;                 // a plain global beside them: not managed

// mv_count += v (once); mv_arr[i] += v + i for every i.
extern "C" __global__ void mv_add(int v)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) mv_count += v;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < MV_LEN;
         i += gridDim.x * blockDim.x)
        mv_arr[i] += (unsigned)v + i;
}

// out[i] = mv_arr[i] + mv_count for i < MV_LEN; out[MV_LEN] = mv_init; out[MV_LEN + 1] =
// mv_plain.
extern "C" __global__ void mv_read(unsigned int *out)
{
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < MV_LEN;
         i += gridDim.x * blockDim.x)
        out[i] = mv_arr[i] + (unsigned)mv_count;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[MV_LEN] = (unsigned)mv_init;
        out[MV_LEN + 1] = (unsigned)mv_plain;
    }
}
