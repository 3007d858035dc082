// Test kernels shared by the CI tier and the GPU tier.
//
// Built to PTX (kernels.ptx), cubin (kernels.sm_90.cubin) and an uncompressed fat
// binary (kernels.fatbin) by the Makefile. On the GPU they run as written; behind the
// CPU test driver (tests/cpudrv) each `.entry` name maps to a CPU twin in
// tests/cpudrv/twins.c that computes the same result. Change both together.
//
// Every kernel is extern "C" so that its `.entry` name is the plain C name.

#include <stdint.h>

__device__ float g_table[256];
__device__ float g_offset;
__device__ unsigned int g_counter;

// Deterministic pattern shared by write_pattern/check_pattern and the host code of tests.
__device__ __forceinline__ unsigned int pattern_at(unsigned int seed, unsigned long long i)
{
    return (unsigned int)(i * 2654435761ull) ^ seed;
}

extern "C" __global__ void empty_kernel(void) {}

extern "C" __global__ void vec_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float alpha, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + y[i];
}

extern "C" __global__ void fill_u32(unsigned int *p, unsigned int value, unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = value;
}

extern "C" __global__ void inc_u32(unsigned int *p, unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] += 1;
}

// Not commutative with itself for different (mul, add): order-sensitive chains.
extern "C" __global__ void mul_add_i32(int *p, int mul, int add, unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = p[i] * mul + add;
}

// Parameters of every size and alignment, to check the packing of kernel parameters.
extern "C" __global__ void param_mix(char c, double d, short s, int i, unsigned long long u,
                                     float f, double *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = c;
        out[1] = d;
        out[2] = s;
        out[3] = i;
        out[4] = (double)u;
        out[5] = f;
    }
}

struct mix {
    char tag;
    double val;
    int arr[3];
};

extern "C" __global__ void struct_param(struct mix m, double *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = m.tag;
        out[1] = m.val;
        out[2] = m.arr[0];
        out[3] = m.arr[1];
        out[4] = m.arr[2];
    }
}

// out[i] = g_table[i] * 2 + g_offset, for i < n (n <= 256).
extern "C" __global__ void globals_read(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = g_table[i] * 2.0f + g_offset;
}

// Every thread adds one to g_counter.
extern "C" __global__ void global_counter_bump(void)
{
    atomicAdd(&g_counter, 1u);
}

// out[blockIdx.x] = sum of in[blockIdx.x * blockDim.x .. + blockDim.x) (elements past n count 0).
// Uses blockDim.x * sizeof(long long) bytes of dynamic shared memory; blockDim.x a power of 2.
extern "C" __global__ void block_sum(const int *in, long long *out, int n)
{
    extern __shared__ long long sdata[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sdata[0];
}

// Thread 0 of block 0 waits `ns` nanoseconds (GPU global timer), then stores `value` to *flag.
// Used to make a stream busy for a known time in ordering tests.
extern "C" __global__ void delay_set(unsigned int *flag, unsigned int value, unsigned long long ns)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < ns);
        *(volatile unsigned int *)flag = value;
    }
}

// Thread 0 of block 0 waits until *flag == value (another stream's or another thread's work
// stores it: a collective's peer, say), for at most `ns` nanoseconds; then *out = 1 if it saw
// the value, 2 if it gave up. Used to test that work another thread launches meanwhile is not
// held up behind this one's wait (tests/progs/thread_peer).
extern "C" __global__ void await_u32(const unsigned int *flag, unsigned int value,
                                     unsigned long long ns, unsigned int *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        unsigned int seen = 0;
        do {
            seen = *(const volatile unsigned int *)flag == value;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (!seen && now - start < ns);
        *(volatile unsigned int *)out = seen ? 1u : 2u;
    }
}

extern "C" __global__ void copy_u8(const unsigned char *src, unsigned char *dst,
                                   unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// p[i] = (unsigned)(i * 2654435761) ^ seed
extern "C" __global__ void write_pattern(unsigned int *p, unsigned long long n, unsigned int seed)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = pattern_at(seed, i);
}

// *errors += number of i < n with p[i] != pattern_at(seed, i)
extern "C" __global__ void check_pattern(const unsigned int *p, unsigned long long n,
                                         unsigned int seed, unsigned int *errors)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        if (p[i] != pattern_at(seed, i)) atomicAdd(errors, 1u);
}
