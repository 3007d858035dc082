// Self-test: what each CPU twin computes, and launch validation.
#include "selftest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void launch(const char *name, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                   unsigned shmem, void **args)
{
    CK(cuLaunchKernel(st_fn(name), gx, gy, 1, bx, by, 1, shmem, NULL, args, NULL));
}

static uint32_t pattern_at(uint32_t seed, uint64_t i)
{
    return (uint32_t)(i * 2654435761ull) ^ seed;
}

void st_twins(void)
{
    enum { N = 1000, CAP = 1100 };
    CUdeviceptr a, b, c;
    CK(cuMemAlloc(&a, CAP * 8));
    CK(cuMemAlloc(&b, CAP * 8));
    CK(cuMemAlloc(&c, CAP * 8));
    float fa[CAP], fb[CAP], fc[CAP];
    for (int i = 0; i < CAP; i++)
        fa[i] = (float)i * 0.5f, fb[i] = 1.0f / (float)(i + 1), fc[i] = -1;
    CK(cuMemcpyHtoD(a, fa, sizeof fa));
    CK(cuMemcpyHtoD(b, fb, sizeof fb));
    CK(cuMemcpyHtoD(c, fc, sizeof fc));
    int n = N;
    launch("empty_kernel", 1, 1, 1, 1, 0, NULL);
    // vec_add: 4 blocks of 256 threads cover 1024 >= n; elements past n untouched.
    void *va[] = {&a, &b, &c, &n};
    launch("vec_add", 4, 1, 256, 1, 0, va);
    CK(cuMemcpyDtoH(fc, c, sizeof fc));
    int ok = 1;
    for (int i = 0; i < CAP; i++)
        ok &= i < N ? fc[i] == fa[i] + fb[i] : fc[i] == -1;
    CHECK(ok);
    // A grid too small to cover n leaves the rest alone.
    CK(cuMemsetD32(c, 0, CAP));
    launch("vec_add", 2, 1, 100, 1, 0, va);
    CK(cuMemcpyDtoH(fc, c, sizeof fc));
    CHECK(fc[199] == fa[199] + fb[199] && fc[200] == 0);
    // saxpy: y = fma(alpha, x, y).
    float alpha = 3.25f, y[CAP];
    CK(cuMemcpyHtoD(c, fb, sizeof fb));
    void *sa[] = {&alpha, &a, &c, &n};
    launch("saxpy", 8, 1, 128, 1, 0, sa);
    CK(cuMemcpyDtoH(y, c, sizeof y));
    ok = 1;
    for (int i = 0; i < CAP; i++)
        ok &= y[i] == (i < N ? fmaf(alpha, fa[i], fb[i]) : fb[i]);
    CHECK(ok);
    // fill_u32 and inc_u32: grid-stride loops; y copies of the grid each add one.
    unsigned long long big = 100000;
    CUdeviceptr u;
    CK(cuMemAlloc(&u, big * 4));
    unsigned val = 0xc0ffee;
    void *fa3[] = {&u, &val, &big};
    launch("fill_u32", 3, 1, 64, 1, 0, fa3);
    void *ia[] = {&u, &big};
    launch("inc_u32", 2, 2, 32, 1, 0, ia);
    unsigned *hu = malloc(big * 4);
    CK(cuMemcpyDtoH(hu, u, big * 4));
    CHECK(hu[0] == 0xc0ffee + 2 && hu[big - 1] == 0xc0ffee + 2);
    // mul_add_i32: order-sensitive chain on one stream.
    unsigned long long m = 10;
    CK(cuMemsetD32(u, 5, 10));
    int mul = 2, add = 3, mul2 = -3, add2 = 1;
    void *ma[] = {&u, &mul, &add, &m}, *mb[] = {&u, &mul2, &add2, &m};
    launch("mul_add_i32", 1, 1, 4, 1, 0, ma);
    launch("mul_add_i32", 1, 1, 4, 1, 0, mb);
    int hi[10];
    CK(cuMemcpyDtoH(hi, u, sizeof hi));
    CHECK(hi[0] == (5 * 2 + 3) * -3 + 1 && hi[9] == hi[0]);
    // param_mix through kernelParams and through a packed `extra` buffer.
    CUdeviceptr out;
    CK(cuMemAlloc(&out, 64));
    char ch = 'A';
    double dv = -1.25;
    short sv = 300;
    int iv = -9;
    unsigned long long uv = 77;
    float fv = 1.5f;
    void *pm[] = {&ch, &dv, &sv, &iv, &uv, &fv, &out};
    launch("param_mix", 1, 1, 1, 1, 0, pm);
    double r[6];
    CK(cuMemcpyDtoH(r, out, sizeof r));
    CHECK(r[0] == 'A' && r[1] == -1.25 && r[2] == 300 && r[3] == -9 && r[4] == 77 && r[5] == 1.5);
    unsigned char packed[48] = {0};
    packed[0] = 'z';
    memcpy(packed + 8, &dv, 8);
    memcpy(packed + 16, &sv, 2);
    memcpy(packed + 20, &iv, 4);
    memcpy(packed + 24, &uv, 8);
    memcpy(packed + 32, &fv, 4);
    memcpy(packed + 40, &out, 8);
    size_t psize = sizeof packed;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                     CU_LAUNCH_PARAM_END};
    CK(cuLaunchKernel(st_fn("param_mix"), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
    CK(cuMemcpyDtoH(r, out, sizeof r));
    CHECK(r[0] == 'z' && r[1] == -1.25 && r[3] == -9);
    // struct_param: struct mix {char tag; double val; int arr[3];} by value (32 bytes).
    struct mix {
        char tag;
        double val;
        int arr[3];
    } mx = {'q', 6.5, {1, -2, 3}};
    void *sp[] = {&mx, &out};
    launch("struct_param", 1, 1, 1, 1, 0, sp);
    CK(cuMemcpyDtoH(r, out, 5 * 8));
    CHECK(r[0] == 'q' && r[1] == 6.5 && r[2] == 1 && r[3] == -2 && r[4] == 3);
    // globals_read and global_counter_bump use the module's globals.
    CUdeviceptr gt, go, gc;
    CK(cuModuleGetGlobal(&gt, NULL, st_mod, "g_table"));
    CK(cuModuleGetGlobal(&go, NULL, st_mod, "g_offset"));
    CK(cuModuleGetGlobal(&gc, NULL, st_mod, "g_counter"));
    float table[256], off = 0.75f;
    for (int i = 0; i < 256; i++)
        table[i] = (float)i;
    CK(cuMemcpyHtoD(gt, table, sizeof table));
    CK(cuMemcpyHtoD(go, &off, 4));
    int gn = 256;
    void *gr[] = {&c, &gn};
    launch("globals_read", 1, 1, 256, 1, 0, gr);
    CK(cuMemcpyDtoH(y, c, 256 * 4));
    CHECK(y[0] == 0.75f && y[255] == 510.75f);
    CK(cuMemsetD32(gc, 0, 1));
    launch("global_counter_bump", 3, 2, 32, 2, 0, NULL);
    launch("global_counter_bump", 1, 1, 5, 1, 0, NULL);
    unsigned cnt = 0;
    CK(cuMemcpyDtoH(&cnt, gc, 4));
    CHECK(cnt == 3 * 2 * 32 * 2 + 5);
    // block_sum: one sum per block, with blockDim.x * 8 bytes of dynamic shared memory.
    int iv2[CAP];
    for (int i = 0; i < CAP; i++)
        iv2[i] = i % 2 ? -i : 3 * i;
    CK(cuMemcpyHtoD(a, iv2, sizeof iv2));
    void *bs[] = {&a, &b, &n};
    launch("block_sum", 8, 1, 128, 1, 128 * 8, bs);
    long long sums[8];
    CK(cuMemcpyDtoH(sums, b, sizeof sums));
    ok = 1;
    for (int blk = 0; blk < 8; blk++) {
        long long want = 0;
        for (int i = blk * 128; i < blk * 128 + 128 && i < N; i++)
            want += iv2[i];
        ok &= sums[blk] == want;
    }
    CHECK(ok);
    // copy_u8, write_pattern, check_pattern (atomic error count).
    unsigned long long nb = 777;
    void *cu[] = {&a, &c, &nb};
    launch("copy_u8", 2, 1, 64, 1, 0, cu);
    unsigned char x1[777], x2[777];
    CK(cuMemcpyDtoH(x1, a, 777));
    CK(cuMemcpyDtoH(x2, c, 777));
    CHECK(memcmp(x1, x2, 777) == 0);
    unsigned seed = 0x5eed;
    void *wp[] = {&u, &big, &seed};
    launch("write_pattern", 4, 1, 256, 1, 0, wp);
    CK(cuMemcpyDtoH(hu, u, big * 4));
    CHECK(hu[0] == pattern_at(seed, 0) && hu[big - 1] == pattern_at(seed, big - 1));
    CUdeviceptr errs;
    CK(cuMemAlloc(&errs, 4));
    CK(cuMemsetD32(errs, 0, 1));
    void *cp[] = {&u, &big, &seed, &errs};
    launch("check_pattern", 4, 1, 256, 1, 0, cp);
    CK(cuMemsetD32(u + 40, 0, 3));
    launch("check_pattern", 4, 1, 256, 1, 0, cp);
    unsigned ecount = 99;
    CK(cuMemcpyDtoH(&ecount, errs, 4));
    CHECK(ecount == 3);
    // negate_i32, from the second module.
    int neg[5] = {1, -2, 3, -4, 5}, n5 = 4;
    CK(cuMemcpyHtoD(a, neg, sizeof neg));
    void *na[] = {&a, &n5};
    launch("negate_i32", 1, 1, 8, 1, 0, na);
    CK(cuMemcpyDtoH(neg, a, sizeof neg));
    CHECK(neg[0] == -1 && neg[1] == 2 && neg[3] == 4 && neg[4] == 5);
    free(hu);
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuMemFree(u));
    CK(cuMemFree(out));
    CK(cuMemFree(errs));
}

void st_launch_errors(void)
{
    CUfunction f = st_fn("fill_u32");
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 4096));
    unsigned v = 1;
    unsigned long long n = 16;
    void *args[] = {&p, &v, &n};
    EXPECT(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 0, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1, 65536, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1u << 31, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 49153, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 49153, NULL, args, NULL));
    CK(cuLaunchKernel(f, 2147483647u, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    EXPECT(cuLaunchKernel((CUfunction)&v, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
           CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    size_t sz = 24;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &sz,
                     CU_LAUNCH_PARAM_END};
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, extra), CUDA_ERROR_INVALID_VALUE);
    sz = 8;
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_ERROR_INVALID_VALUE);
    int junk;
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)&junk, args, NULL),
           CUDA_ERROR_INVALID_HANDLE);
    // Cooperative launches must fit on the device at once (8 blocks of 256 per SM).
    CK(cuLaunchCooperativeKernel(f, 132 * 8, 1, 1, 256, 1, 1, 0, NULL, args));
    EXPECT(cuLaunchCooperativeKernel(f, 132 * 8 + 1, 1, 1, 256, 1, 1, 0, NULL, args),
           CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CUlaunchAttribute at[2];
    memset(at, 0, sizeof at);
    at[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    at[0].value.priority = -1;
    at[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    at[1].value.cooperative = 1;
    CUlaunchConfig cfg = {132 * 8 + 1, 1, 1, 256, 1, 1, 0, NULL, at, 2};
    EXPECT(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    cfg.gridDimX = 4;
    v = 9;
    CK(cuLaunchKernelEx(&cfg, f, args, NULL));
    unsigned got = 0;
    CK(cuMemcpyDtoH(&got, p + 60, 4));
    CHECK(got == 9);
    cfg.blockDimX = 2048;
    EXPECT(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(p));
}
