/* modules: loading kernel images every way the driver offers (PTX with and without JIT
 * options, the sm_90 cubin, the fat binary, libraries), functions and globals looked up in
 * them, globals kept per module, enumeration, unload and reload. Every loaded image runs a
 * kernel whose result is checked. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1000

static CUdeviceptr g_a, g_b, g_c; /* N floats each */

/* Runs vec_add (from any image) on fresh inputs and checks c = a + b. */
static void run_vec_add(CUfunction f, const char *what)
{
    static int round;
    float a[N], b[N], c[N];
    int n = N;
    round++;
    for (int i = 0; i < N; i++) {
        a[i] = (float)(i + round);
        b[i] = (float)(2 * i);
    }
    CHECK(cuMemcpyHtoD(g_a, a, sizeof a));
    CHECK(cuMemcpyHtoD(g_b, b, sizeof b));
    CHECK(cuMemsetD32(g_c, 0, N));
    void *args[] = {&g_a, &g_b, &g_c, &n};
    CHECK(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(c, g_c, sizeof c));
    for (int i = 0; i < N; i++)
        REQUIRE(c[i] == a[i] + b[i], "%s: c[%d] = %g, want %g", what, i, (double)c[i],
                (double)(a[i] + b[i]));
}

/* Runs saxpy (y = 2.5 x + y) and checks it. */
static void run_saxpy(CUfunction f, const char *what)
{
    float x[N], y[N], out[N], alpha = 2.5f;
    int n = N;
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 17);
        y[i] = (float)i;
    }
    CHECK(cuMemcpyHtoD(g_a, x, sizeof x));
    CHECK(cuMemcpyHtoD(g_c, y, sizeof y));
    void *args[] = {&alpha, &g_a, &g_c, &n};
    CHECK(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(out, g_c, sizeof out));
    for (int i = 0; i < N; i++)
        REQUIRE(out[i] == alpha * x[i] + y[i], "%s: y[%d] = %g", what, i, (double)out[i]);
}

/* Writes g_table[i] = i * scale and g_offset = offset through the given device pointers,
 * runs globals_read and checks out[i] = g_table[i] * 2 + g_offset. */
static void run_globals(CUfunction globals_read, CUdeviceptr table, CUdeviceptr offset, float scale,
                        float off, const char *what)
{
    float tab[256], out[256];
    int n = 256;
    for (int i = 0; i < 256; i++)
        tab[i] = (float)i * scale;
    CHECK(cuMemcpyHtoD(table, tab, sizeof tab));
    CHECK(cuMemcpyHtoD(offset, &off, sizeof off));
    CHECK(cuMemsetD32(g_c, 0, 256));
    void *args[] = {&g_c, &n};
    CHECK(cuLaunchKernel(globals_read, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(out, g_c, sizeof out));
    for (int i = 0; i < 256; i++)
        REQUIRE(out[i] == tab[i] * 2.0f + off, "%s: out[%d] = %g, want %g", what, i, (double)out[i],
                (double)(tab[i] * 2.0f + off));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Enumerates the functions of mod, checks the count and prints the sorted names. */
static void list_functions(CUmodule mod, unsigned want, const char *label)
{
    unsigned count = 0;
    CHECK(cuModuleGetFunctionCount(&count, mod));
    REQUIRE(count == want, "%s: cuModuleGetFunctionCount %u, want %u", label, count, want);
    CUfunction *fs = calloc(count, sizeof *fs);
    const char **names = calloc(count, sizeof *names);
    REQUIRE(fs && names, "out of host memory");
    CHECK(cuModuleEnumerateFunctions(fs, count, mod));
    for (unsigned i = 0; i < count; i++) {
        CHECK(cuFuncGetName(&names[i], fs[i]));
        REQUIRE(names[i] && names[i][0], "%s: function %u has no name", label, i);
    }
    qsort(names, count, sizeof *names, cmp_str);
    printf("%s functions:", label);
    for (unsigned i = 0; i < count; i++)
        printf(" %s", names[i]);
    printf("\n");
    t_ok("%s: cuModuleGetFunctionCount/cuModuleEnumerateFunctions/cuFuncGetName", label);
    free(fs);
    free(names);
}

static void ptx_plain(void)
{
    CUmodule m = t_load_module("kernels.ptx");
    run_vec_add(t_get_function(m, "vec_add"), "PTX cuModuleLoadData");
    CHECK(cuModuleUnload(m));
    t_ok("PTX with cuModuleLoadData");
}

static void ptx_jit_options(void)
{
    char *ptx = t_read_kernel_file("kernels.ptx", NULL);
    static char info[16384], err[16384];
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_LOG_VERBOSE};
    void *vals[] = {info, (void *)(uintptr_t)sizeof info, err, (void *)(uintptr_t)sizeof err,
                    (void *)(uintptr_t)1};
    CUmodule m;
    CHECK(cuModuleLoadDataEx(&m, ptx, 5, opts, vals));
    /* The size options come back holding the bytes written; the logs stay terminated. */
    REQUIRE((uintptr_t)vals[1] <= sizeof info && (uintptr_t)vals[3] <= sizeof err,
            "JIT log sizes out of range after load");
    REQUIRE(memchr(info, 0, sizeof info) && memchr(err, 0, sizeof err), "JIT log not terminated");
    run_saxpy(t_get_function(m, "saxpy"), "PTX cuModuleLoadDataEx");
    CHECK(cuModuleUnload(m));
    t_ok("PTX with cuModuleLoadDataEx and JIT log options");

    /* Not an image at all: refused, with the error log buffer given. */
    static const char junk[] = "this is not a kernel image\n";
    vals[1] = (void *)(uintptr_t)sizeof info;
    vals[3] = (void *)(uintptr_t)sizeof err;
    EXPECT_ERR(cuModuleLoadDataEx(&m, junk, 5, opts, vals));
    t_ok("an invalid image is refused");
    free(ptx);
}

static void cubin_and_fatbin(CUdevice dev)
{
    int major = 0, minor = 0;
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CUmodule m;
    /* The cubin runs on sm_90 only; both runs being compared see the same device. */
    if (major == 9 && minor == 0) {
        m = t_load_module("kernels.sm_90.cubin");
        run_vec_add(t_get_function(m, "vec_add"), "cubin");
        CHECK(cuModuleUnload(m));
        t_ok("sm_90 cubin with cuModuleLoadData");
    }

    void *fat = t_read_kernel_file("kernels.fatbin", NULL);
    CHECK(cuModuleLoadFatBinary(&m, fat));
    run_vec_add(t_get_function(m, "vec_add"), "fatbin cuModuleLoadFatBinary");
    CHECK(cuModuleUnload(m));
    t_ok("fat binary with cuModuleLoadFatBinary");
    CHECK(cuModuleLoadData(&m, fat));
    run_saxpy(t_get_function(m, "saxpy"), "fatbin cuModuleLoadData");
    CHECK(cuModuleUnload(m));
    t_ok("fat binary with cuModuleLoadData");
    free(fat);
}

static void library(void)
{
    char *ptx = t_read_kernel_file("kernels.ptx", NULL);
    CUlibrary lib;
    CHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    free(ptx); /* the driver keeps its own copy unless told the code is preserved */

    CUkernel k;
    CHECK(cuLibraryGetKernel(&k, lib, "vec_add"));
    run_vec_add((CUfunction)k, "CUkernel cast to CUfunction");
    t_ok("cuLibraryLoadData + cuLibraryGetKernel, CUkernel launched");

    CUfunction f;
    CHECK(cuKernelGetFunction(&f, k));
    run_vec_add(f, "cuKernelGetFunction");
    t_ok("cuKernelGetFunction");

    CUmodule lm;
    CHECK(cuLibraryGetModule(&lm, lib));
    run_saxpy(t_get_function(lm, "saxpy"), "cuLibraryGetModule");
    t_ok("cuLibraryGetModule + cuModuleGetFunction");

    CUdeviceptr table, offset;
    size_t bytes = 0;
    CHECK(cuLibraryGetGlobal(&table, &bytes, lib, "g_table"));
    REQUIRE(bytes == 256 * sizeof(float), "cuLibraryGetGlobal g_table: %zu bytes", bytes);
    CHECK(cuLibraryGetGlobal(&offset, &bytes, lib, "g_offset"));
    REQUIRE(bytes == sizeof(float), "cuLibraryGetGlobal g_offset: %zu bytes", bytes);
    CUkernel gk;
    CHECK(cuLibraryGetKernel(&gk, lib, "globals_read"));
    run_globals((CUfunction)gk, table, offset, 0.75f, -3.5f, "library globals");
    t_ok("cuLibraryGetGlobal + globals_read");

    EXPECT(cuLibraryGetKernel(&k, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    CHECK(cuLibraryUnload(lib));
    t_ok("cuLibraryUnload");
}

/* Globals of one module: g_table/g_offset read by a kernel, g_counter bumped by atomics. */
static void module_globals(CUmodule m, const char *label)
{
    CUdeviceptr table, offset, counter;
    size_t bytes = 0;
    CHECK(cuModuleGetGlobal(&table, &bytes, m, "g_table"));
    REQUIRE(bytes == 256 * sizeof(float), "g_table: %zu bytes", bytes);
    CHECK(cuModuleGetGlobal(&offset, &bytes, m, "g_offset"));
    REQUIRE(bytes == sizeof(float), "g_offset: %zu bytes", bytes);
    CHECK(cuModuleGetGlobal(&counter, &bytes, m, "g_counter"));
    REQUIRE(bytes == sizeof(unsigned), "g_counter: %zu bytes", bytes);
    /* Either output may be NULL. */
    CHECK(cuModuleGetGlobal(&table, NULL, m, "g_table"));
    CHECK(cuModuleGetGlobal(NULL, &bytes, m, "g_table"));

    run_globals(t_get_function(m, "globals_read"), table, offset, 0.5f, 1.25f, label);

    CUfunction bump = t_get_function(m, "global_counter_bump");
    unsigned got = 0;
    CHECK(cuMemsetD32(counter, 0, 1));
    CHECK(cuLaunchKernel(bump, 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
    CHECK(cuLaunchKernel(bump, 2, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK(cuMemcpyDtoH(&got, counter, 4));
    REQUIRE(got == 320, "%s: g_counter %u after 320 bumps", label, got);
    t_ok("%s: cuModuleGetGlobal, globals_read, global_counter_bump", label);
}

/* Two images loaded at once, and the same image loaded twice: functions are found only in
 * the module that has them, and each module has globals of its own. */
static void two_modules(void)
{
    CUmodule ma = t_load_module("kernels.ptx");
    CUmodule ma2 = t_load_module("kernels.ptx");
    CUmodule mb = t_load_module("kernels2.ptx");
    CUfunction f;

    int v[N], out[N], n = N;
    for (int i = 0; i < N; i++)
        v[i] = i * 7 - 500;
    CHECK(cuMemcpyHtoD(g_a, v, sizeof v));
    void *args[] = {&g_a, &n};
    CHECK(cuLaunchKernel(t_get_function(mb, "negate_i32"), (N + 127) / 128, 1, 1, 128, 1, 1, 0,
                         NULL, args, NULL));
    CHECK(cuMemcpyDtoH(out, g_a, sizeof out));
    for (int i = 0; i < N; i++)
        REQUIRE(out[i] == -v[i], "negate_i32: out[%d] = %d", i, out[i]);
    run_vec_add(t_get_function(ma, "vec_add"), "first of two modules");
    t_ok("kernels.ptx and kernels2.ptx loaded together, both run");

    EXPECT(cuModuleGetFunction(&f, ma, "negate_i32"), CUDA_ERROR_NOT_FOUND);
    EXPECT(cuModuleGetFunction(&f, mb, "vec_add"), CUDA_ERROR_NOT_FOUND);
    CUdeviceptr p;
    size_t bytes;
    EXPECT(cuModuleGetGlobal(&p, &bytes, mb, "g_table"), CUDA_ERROR_NOT_FOUND);
    t_ok("functions and globals found only in their own module");

    CUdeviceptr ta, oa, ta2, oa2;
    CHECK(cuModuleGetGlobal(&ta, NULL, ma, "g_table"));
    CHECK(cuModuleGetGlobal(&oa, NULL, ma, "g_offset"));
    CHECK(cuModuleGetGlobal(&ta2, NULL, ma2, "g_table"));
    CHECK(cuModuleGetGlobal(&oa2, NULL, ma2, "g_offset"));
    REQUIRE(ta != ta2 && oa != oa2, "two loads of one image share their globals");
    float t1[256], t2[256], o1 = 1.25f, o2 = 100.0f, out1[256], out2[256];
    int n256 = 256;
    for (int i = 0; i < 256; i++) {
        t1[i] = (float)i;
        t2[i] = (float)(1000 - i);
    }
    CHECK(cuMemcpyHtoD(ta, t1, sizeof t1));
    CHECK(cuMemcpyHtoD(oa, &o1, 4));
    CHECK(cuMemcpyHtoD(ta2, t2, sizeof t2));
    CHECK(cuMemcpyHtoD(oa2, &o2, 4));
    void *ga[] = {&g_b, &n256}, *gc[] = {&g_c, &n256};
    CHECK(
        cuLaunchKernel(t_get_function(ma, "globals_read"), 1, 1, 1, 256, 1, 1, 0, NULL, ga, NULL));
    CHECK(
        cuLaunchKernel(t_get_function(ma2, "globals_read"), 1, 1, 1, 256, 1, 1, 0, NULL, gc, NULL));
    CHECK(cuMemcpyDtoH(out1, g_b, sizeof out1));
    CHECK(cuMemcpyDtoH(out2, g_c, sizeof out2));
    for (int i = 0; i < 256; i++)
        REQUIRE(out1[i] == t1[i] * 2 + o1 && out2[i] == t2[i] * 2 + o2,
                "module globals mixed up at %d: %g %g", i, (double)out1[i], (double)out2[i]);
    t_ok("each module has its own globals");

    list_functions(ma, 16, "kernels.ptx");
    list_functions(mb, 1, "kernels2.ptx");

    EXPECT(cuModuleGetFunction(&f, ma, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    t_ok("cuModuleGetFunction of an unknown name: CUDA_ERROR_NOT_FOUND");

    CHECK(cuModuleUnload(ma2));
    ma2 = t_load_module("kernels.ptx");
    run_vec_add(t_get_function(ma2, "vec_add"), "reloaded module");
    module_globals(ma2, "reloaded module");
    t_ok("cuModuleUnload then load again");

    CHECK(cuModuleUnload(ma));
    CHECK(cuModuleUnload(ma2));
    CHECK(cuModuleUnload(mb));
}

/* Libraries belong to no context: cuDNN 9 loads its kernels before it has one. */
static CUlibrary g_early_lib;
static CUkernel g_early_kernel;

static void library_before_context(void)
{
    CHECK(cuInit(0));
    CUcontext none = NULL;
    CHECK(cuCtxGetCurrent(&none));
    REQUIRE(none == NULL, "a context is current before any was made");
    char *ptx = t_read_kernel_file("kernels.ptx", NULL);
    CHECK(cuLibraryLoadData(&g_early_lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    free(ptx);
    CHECK(cuLibraryGetKernel(&g_early_kernel, g_early_lib, "vec_add"));
    unsigned count = 0;
    CHECK(cuLibraryGetKernelCount(&count, g_early_lib));
    REQUIRE(count > 1, "cuLibraryGetKernelCount: %u", count);
    int threads = 0;
    CHECK(
        cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, g_early_kernel, 0));
    REQUIRE(threads > 0, "cuKernelGetAttribute: %d threads", threads);
    t_ok("cuLibraryLoadData, cuLibraryGetKernel, kernel queries with no context current");
}

int main(void)
{
    t_init("modules", 300);
    CUdevice dev;
    CUcontext ctx;
    library_before_context();
    t_setup(&dev, &ctx);
    CHECK(cuMemAlloc(&g_a, N * 4));
    CHECK(cuMemAlloc(&g_b, N * 4));
    CHECK(cuMemAlloc(&g_c, N * 4));
    t_ok("setup");
    run_vec_add((CUfunction)g_early_kernel, "a kernel loaded before any context");
    CHECK(cuLibraryUnload(g_early_lib));
    t_ok("the library loaded before any context serves the context made later");

    ptx_plain();
    ptx_jit_options();
    cubin_and_fatbin(dev);
    library();
    CUmodule m = t_load_module("kernels.ptx");
    module_globals(m, "kernels.ptx");
    CHECK(cuModuleUnload(m));
    two_modules();

    CHECK(cuMemFree(g_a));
    CHECK(cuMemFree(g_b));
    CHECK(cuMemFree(g_c));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
