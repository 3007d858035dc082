// Self-test: modules, libraries, functions, PTX/cubin/fatbin images, JIT options.
#include "selftest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void layout(CUfunction f, unsigned n, const size_t *off, const size_t *size)
{
    for (unsigned i = 0; i < n; i++) {
        size_t o = 99, s = 99;
        CK(cuFuncGetParamInfo(f, i, &o, &s));
        if (o != off[i] || s != size[i]) st_fail(__FILE__, __LINE__, "parameter layout");
    }
    EXPECT(cuFuncGetParamInfo(f, n, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
}

static const size_t mix_off[] = {0, 8, 16, 20, 24, 32, 40}, mix_size[] = {1, 8, 2, 4, 8, 4, 8};
static const size_t sp_off[] = {0, 32}, sp_size[] = {32, 8};

// The layouts the real driver reports for the kernels with unusual parameters.
static void check_layouts(CUmodule m)
{
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "param_mix"));
    layout(f, 7, mix_off, mix_size);
    CK(cuModuleGetFunction(&f, m, "struct_param"));
    layout(f, 2, sp_off, sp_size);
    CK(cuModuleGetFunction(&f, m, "fill_u32"));
    layout(f, 3, (const size_t[]){0, 8, 16}, (const size_t[]){8, 4, 8});
    CK(cuModuleGetFunction(&f, m, "empty_kernel"));
    layout(f, 0, NULL, NULL);
    CK(cuModuleGetFunction(&f, m, "saxpy"));
    layout(f, 4, (const size_t[]){0, 8, 16, 24}, (const size_t[]){4, 8, 8, 4});
}

static void run_vec_add(CUmodule m)
{
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "vec_add"));
    float a[64], b[64], c[64];
    for (int i = 0; i < 64; i++)
        a[i] = (float)i, b[i] = 0.5f, c[i] = -1;
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, sizeof a));
    CK(cuMemAlloc(&db, sizeof b));
    CK(cuMemAlloc(&dc, sizeof c));
    CK(cuMemcpyHtoD(da, a, sizeof a));
    CK(cuMemcpyHtoD(db, b, sizeof b));
    int n = 64;
    void *args[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(c, dc, sizeof c));
    CHECK(c[0] == 0.5f && c[63] == 63.5f);
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
}

void st_modules(void)
{
    if (!st_mod) st_load();
    unsigned n = 0;
    CK(cuModuleGetFunctionCount(&n, st_mod));
    CHECK(n == 16);
    CK(cuModuleGetFunctionCount(&n, st_mod2));
    CHECK(n == 1);
    CUfunction fs[20] = {0};
    CK(cuModuleEnumerateFunctions(fs, 20, st_mod));
    CHECK(fs[15] && !fs[16]);
    CUfunction f;
    EXPECT(cuModuleGetFunction(&f, st_mod, "nope"), CUDA_ERROR_NOT_FOUND);
    EXPECT(cuModuleGetFunction(&f, st_mod2, "vec_add"), CUDA_ERROR_NOT_FOUND);
    EXPECT(cuModuleGetFunction(&f, (CUmodule)&n, "vec_add"), CUDA_ERROR_INVALID_HANDLE);
    check_layouts(st_mod);
    f = st_fn("block_sum");
    const char *name = NULL;
    CK(cuFuncGetName(&name, f));
    CHECK(name && strcmp(name, "block_sum") == 0);
    CUmodule m = NULL;
    CK(cuFuncGetModule(&m, f));
    CHECK(m == st_mod);
    int v = 0;
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    CHECK(v == 1024);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    CHECK(v == 32);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f));
    CHECK(v == 90);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
    CHECK(v == 0);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    CHECK(v == 49152);
    CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000));
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    CHECK(v == 100000);
    EXPECT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, f), CUDA_ERROR_INVALID_VALUE);
    CK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_L1));
    EXPECT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)&v),
           CUDA_ERROR_INVALID_HANDLE);
    CUfunctionLoadingState ls;
    CK(cuFuncIsLoaded(&ls, f));
    CHECK(ls == CU_FUNCTION_LOADING_STATE_LOADED);
    CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&v, f, 256, 0));
    CHECK(v == 8);
    CK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 32, 0, 0));
    CHECK(v == 32);
    int grid = 0, block = 0;
    CK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
    CHECK(block > 0 && block <= 1024 && grid > 0);
    // Globals: sizes from the PTX declarations, zeroed, one copy per module.
    CUdeviceptr g1, g2;
    size_t gs = 0;
    CK(cuModuleGetGlobal(&g1, &gs, st_mod, "g_table"));
    CHECK(gs == 1024);
    CK(cuModuleGetGlobal(NULL, &gs, st_mod, "g_offset"));
    CHECK(gs == 4);
    EXPECT(cuModuleGetGlobal(&g2, &gs, st_mod, "g_nothing"), CUDA_ERROR_NOT_FOUND);
    unsigned char *ptx = st_read("kernels.ptx", NULL);
    CUmodule m2;
    CK(cuModuleLoadData(&m2, ptx));
    CK(cuModuleGetGlobal(&g2, NULL, m2, "g_table"));
    CHECK(g1 != g2);
    float t = 1.5f, z = -1;
    CK(cuMemcpyHtoD(g1, &t, 4));
    CK(cuMemcpyDtoH(&z, g2, 4));
    CHECK(z == 0);
    unsigned mt = 0;
    CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g2 + 100));
    CHECK(mt == CU_MEMORYTYPE_DEVICE);
    // Unloading while a launch from the module is queued: the launch still runs.
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr flag;
    CK(cuMemAlloc(&flag, 4));
    CK(cuMemsetD32(flag, 0, 1));
    CUfunction ds;
    CK(cuModuleGetFunction(&ds, m2, "delay_set"));
    unsigned val = 77;
    unsigned long long ns = 100000000ull;
    void *args[] = {&flag, &val, &ns};
    CK(cuLaunchKernel(ds, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CK(cuModuleUnload(m2));
    EXPECT(cuModuleUnload(m2), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuLaunchKernel(ds, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuMemcpyHtoD(g2, &t, 4), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(&val, flag, 4));
    CHECK(val == 77);
    CK(cuMemFree(flag));
    CK(cuStreamDestroy(s));
    // JIT options: logs, wall time; a missing twin and a wrong signature fail to load.
    char info[256] = "x", err[256] = "x";
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER,  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_WALL_TIME,        CU_JIT_OPTIMIZATION_LEVEL};
    void *vals[] = {info,
                    (void *)(uintptr_t)sizeof info,
                    err,
                    (void *)(uintptr_t)sizeof err,
                    (void *)(uintptr_t)0x12345678,
                    (void *)(uintptr_t)3};
    CK(cuModuleLoadDataEx(&m2, ptx, 6, opts, vals));
    float wall = -1;
    memcpy(&wall, &vals[4], sizeof wall);
    CHECK(wall == 0.0f && strstr(info, "16 kernels") && err[0] == 0);
    CHECK((size_t)(uintptr_t)vals[1] == strlen(info) + 1);
    CK(cuModuleUnload(m2));
    static const char missing[] = ".version 9.0\n.target sm_90\n.address_size 64\n"
                                  ".visible .entry no_such_kernel(.param .u64 p)\n{\nret;\n}\n";
    vals[1] = (void *)(uintptr_t)sizeof info;
    vals[3] = (void *)(uintptr_t)sizeof err;
    fprintf(stderr, "(expected) ");
    EXPECT(cuModuleLoadDataEx(&m2, missing, 4, opts, vals), CUDA_ERROR_INVALID_PTX);
    CHECK(strstr(err, "no_such_kernel") != NULL);
    static const char wrong[] = ".version 9.0\n.target sm_90\n.address_size 64\n"
                                ".visible .entry vec_add(.param .u32 p)\n{\nret;\n}\n";
    fprintf(stderr, "(expected) ");
    EXPECT(cuModuleLoadData(&m2, wrong), CUDA_ERROR_INVALID_PTX);
    EXPECT(cuModuleLoadData(&m2, "hello, world"), CUDA_ERROR_INVALID_PTX);
    EXPECT(cuModuleLoadData(&m2, "\x01\x02\x03\x04garbage"), CUDA_ERROR_INVALID_IMAGE);
    EXPECT(cuModuleLoadData(&m2, ""), CUDA_ERROR_INVALID_IMAGE);
    EXPECT(cuModuleLoadData(&m2, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuModuleLoadDataEx(&m2, ptx, 1, (CUjit_option[]){CU_JIT_NUM_OPTIONS}, vals),
           CUDA_ERROR_INVALID_VALUE);
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels2.ptx", st_kdir);
    CK(cuModuleLoad(&m2, path));
    CK(cuModuleUnload(m2));
    EXPECT(cuModuleLoad(&m2, "/nonexistent/kernels.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
    CUmoduleLoadingMode mode;
    CK(cuModuleGetLoadingMode(&mode));
    // Libraries: context-independent; a CUkernel is launchable as a CUfunction.
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernelCount(&n, lib));
    CHECK(n == 16);
    CUkernel ks[15], k;
    CK(cuLibraryEnumerateKernels(ks, 15, lib));
    CK(cuLibraryGetKernel(&k, lib, "param_mix"));
    EXPECT(cuLibraryGetKernel(&k, lib, "nope"), CUDA_ERROR_NOT_FOUND);
    CK(cuLibraryGetKernel(&k, lib, "param_mix"));
    CK(cuKernelGetName(&name, k));
    CHECK(strcmp(name, "param_mix") == 0);
    size_t po = 0, psz = 0;
    CK(cuKernelGetParamInfo(k, 4, &po, &psz));
    CHECK(po == 24 && psz == 8);
    EXPECT(cuKernelGetParamInfo(k, 7, &po, &psz), CUDA_ERROR_INVALID_VALUE);
    CK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 60000, k, 0));
    CK(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0));
    CHECK(v == 60000);
    CK(cuKernelSetCacheConfig(k, CU_FUNC_CACHE_PREFER_NONE, 0));
    CUlibrary lib2;
    CK(cuKernelGetLibrary(&lib2, k));
    CHECK(lib2 == lib);
    CUfunction kf;
    CK(cuKernelGetFunction(&kf, k));
    CHECK(kf && (void *)kf != (void *)k);
    CK(cuFuncGetName(&name, kf));
    CHECK(strcmp(name, "param_mix") == 0);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUfunction)k));
    CHECK(v == 60000);
    EXPECT(cuKernelGetName(&name, (CUkernel)kf), CUDA_ERROR_INVALID_HANDLE);
    CUmodule lm;
    CK(cuLibraryGetModule(&lm, lib));
    CK(cuFuncGetModule(&m, kf));
    CHECK(m == lm);
    CK(cuLibraryGetGlobal(&g2, &gs, lib, "g_counter"));
    CHECK(gs == 4);
    EXPECT(cuKernelGetName(&name, (CUkernel)st_fn("vec_add")), CUDA_ERROR_INVALID_HANDLE);
    CUdeviceptr out;
    CK(cuMemAlloc(&out, 64));
    char c = -3;
    double d = 2.5;
    short sh = -7;
    int i = 123456;
    unsigned long long u = 1ull << 40;
    float fl = 0.25f;
    void *pargs[] = {&c, &d, &sh, &i, &u, &fl, &out};
    CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, pargs, NULL));
    double res[6];
    CK(cuMemcpyDtoH(res, out, sizeof res));
    CHECK(res[0] == -3 && res[1] == 2.5 && res[2] == -7 && res[3] == 123456 &&
          res[4] == (double)(1ull << 40) && res[5] == 0.25);
    EXPECT(cuModuleUnload(lm), CUDA_ERROR_INVALID_HANDLE);
    CK(cuLibraryUnload(lib));
    EXPECT(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, pargs, NULL),
           CUDA_ERROR_INVALID_HANDLE);
    snprintf(path, sizeof path, "%s/kernels.sm_90.cubin", st_kdir);
    CK(cuLibraryLoadFromFile(&lib, path, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryUnload(lib));
    CK(cuMemFree(out));
    free(ptx);
}

void st_images(void)
{
    size_t len;
    unsigned char *cubin = st_read("kernels.sm_90.cubin", &len);
    CUmodule m;
    // A cubin: kernels from the symbol table, layouts from .nv.info, globals from .nv.global.
    CK(cuModuleLoadData(&m, cubin));
    unsigned n = 0;
    CK(cuModuleGetFunctionCount(&n, m));
    CHECK(n == 16);
    check_layouts(m);
    size_t gs = 0;
    CK(cuModuleGetGlobal(NULL, &gs, m, "g_table"));
    CHECK(gs == 1024);
    CK(cuModuleGetGlobal(NULL, &gs, m, "g_counter"));
    CHECK(gs == 4);
    run_vec_add(m);
    CK(cuModuleUnload(m));
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels.sm_90.cubin", st_kdir);
    CK(cuModuleLoad(&m, path));
    CK(cuModuleUnload(m));
    // Corrupt cubins are refused, never a crash.
    unsigned char *bad = malloc(len);
    memcpy(bad, cubin, len);
    uint64_t huge = 1ull << 40;
    memcpy(bad + 0x28, &huge, 8); // e_shoff
    EXPECT(cuModuleLoadData(&m, bad), CUDA_ERROR_INVALID_IMAGE);
    memcpy(bad, cubin, len);
    bad[0x12] = 0x3e; // e_machine: x86-64
    EXPECT(cuModuleLoadData(&m, bad), CUDA_ERROR_INVALID_IMAGE);
    free(bad);
    // A fat binary (cubin + PTX), directly and through a __fatBinC_Wrapper_t.
    unsigned char *fat = st_read("kernels.fatbin", &len);
    CK(cuModuleLoadFatBinary(&m, fat));
    check_layouts(m);
    run_vec_add(m);
    CK(cuModuleUnload(m));
    struct {
        int magic, version;
        const void *data;
        void *filename_or_fatbins;
    } wrap = {0x466243b1, 1, fat, NULL};
    CK(cuModuleLoadFatBinary(&m, &wrap));
    CK(cuModuleUnload(m));
    CK(cuModuleLoadData(&m, fat));
    CK(cuModuleUnload(m));
    snprintf(path, sizeof path, "%s/kernels.fatbin", st_kdir);
    CK(cuModuleLoad(&m, path));
    CK(cuModuleUnload(m));
    // A fatbin whose cubin is damaged falls back to its PTX.
    unsigned char *fat2 = malloc(len);
    memcpy(fat2, fat, len);
    for (size_t i = 16; i + 4 < len; i++)
        if (memcmp(fat2 + i, "\177ELF", 4) == 0) {
            fat2[i + 0x12] = 0;
            break;
        }
    CK(cuModuleLoadData(&m, fat2));
    check_layouts(m);
    CK(cuModuleUnload(m));
    uint64_t big = 1ull << 50;
    memcpy(fat2 + 8, &big, 8);
    EXPECT(cuModuleLoadData(&m, fat2), CUDA_ERROR_INVALID_IMAGE);
    memcpy(fat2, fat, len);
    memcpy(fat2 + 16 + 8, &big, 8); // first entry's payload size
    EXPECT(cuModuleLoadData(&m, fat2), CUDA_ERROR_INVALID_IMAGE);
    free(fat2);
    free(fat);
    free(cubin);
}
