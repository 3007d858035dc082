/* launchseq: a step of launches repeated exactly, many times, as an inference server's or a
 * solver's loop does, its result checked after every step; the same steps with a parameter
 * changed now and then, and with a function attribute changed between them; the same
 * sequence on two streams at once; and a kernel writing mapped host memory that the host then
 * waits for without any call. Through mpsshim the repeats are replayed as graphs
 * (server/code/seqgraph.c), held launches included; the output must be native's.
 * launchseq --library: the same with the kernels of a library (CUkernel handles launched as
 * functions, as cudart launches PyTorch's). launchseq --long [--library]: only the steps
 * longer than a sequence the server holds whole. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4096u
#define STEPS 200

static CUfunction f_inc, f_muladd, f_fill;
static int g_library; /* the functions are a library's CUkernels */

static void launch_inc(CUstream s, CUdeviceptr p)
{
    unsigned long long n = N;
    void *a[] = {&p, &n};
    CHECK(cuLaunchKernel(f_inc, N / 256, 1, 1, 256, 1, 1, 0, s, a, NULL));
}

static void launch_muladd(CUstream s, CUdeviceptr p, int mul, int add)
{
    unsigned long long n = N;
    void *a[] = {&p, &mul, &add, &n};
    CHECK(cuLaunchKernel(f_muladd, N / 256, 1, 1, 256, 1, 1, 0, s, a, NULL));
}

static void launch_fill(CUstream s, CUdeviceptr p, unsigned v, unsigned long long n)
{
    void *a[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(f_fill, 1, 1, 1, 32, 1, 1, 0, s, a, NULL));
}

/* One step: x+1, 5-x (6-x when `odd`), x+1, in that order (the order shows: 5-(x+1)+1 is
 * not (5-x)+1+1); returns what the host expects of x. */
static int step(CUstream s, CUdeviceptr p, int x, int odd)
{
    int add = odd ? 6 : 5;
    launch_inc(s, p);
    launch_muladd(s, p, -1, add);
    launch_inc(s, p);
    return add - (x + 1) + 1;
}

/* Every element of p on s is x, read back. */
static void need_all(CUstream s, CUdeviceptr p, int x, const char *what)
{
    static int got[N];
    CHECK(cuMemcpyDtoHAsync(got, p, sizeof(got), s));
    CHECK(cuStreamSynchronize(s));
    for (unsigned i = 0; i < N; i++)
        REQUIRE(got[i] == x, "%s: element %u is %d, want %d", what, i, got[i], x);
}

/* STEPS steps, one 4-byte read-back and a synchronisation after each (a serving loop's
 * `.item()`); every 7th step differs when `vary`. */
static int loop(CUstream s, CUdeviceptr p, int x, int vary, const char *what)
{
    for (int i = 0; i < STEPS; i++) {
        x = step(s, p, x, vary && i % 7 == 3);
        int v;
        CHECK(cuMemcpyDtoHAsync(&v, p, sizeof(v), s));
        CHECK(cuStreamSynchronize(s));
        REQUIRE(v == x, "%s: step %d read %d, want %d", what, i, v, x);
    }
    need_all(s, p, x, what);
    t_ok("%s: %d steps, every result right", what, STEPS);
    return x;
}

/* A long step: LONG_PAIRS x (x+1, 3x+k), 90 launches between two synchronisations (an MPI
 * rank's iteration), more than the server holds whole: it keeps such a run in parts
 * (seqgraph.c), whose first two have the same shape and other values (a graph's nodes
 * updated at every replay), the last a shorter shape of its own (a hold let go at the
 * read-back, as that part's graph). Affine steps of different k do not commute: parts run
 * out of order, or with another part's values, give another x. */
#define LONG_PAIRS 45
#define LONG_STEPS 60
static void long_steps(CUstream s, CUdeviceptr p)
{
    unsigned x = 0;
    CHECK(cuMemsetD32(p, 0, N));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < LONG_STEPS; i++) {
        for (int k = 0; k < LONG_PAIRS; k++) {
            launch_inc(s, p);
            launch_muladd(s, p, 3, k);
            x = (x + 1) * 3u + (unsigned)k;
        }
        unsigned v;
        CHECK(cuMemcpyDtoHAsync(&v, p, sizeof(v), s));
        CHECK(cuStreamSynchronize(s));
        REQUIRE(v == x, "long steps: step %d read %u, want %u", i, v, x);
    }
    need_all(s, p, (int)x, "long steps");
    t_ok("long steps: %d steps of %d launches, every result right", LONG_STEPS, 2 * LONG_PAIRS);
}

/* Two streams each repeating their step, interleaved: the sequences are one stream's each. */
static void two_streams(CUstream s1, CUdeviceptr p1, CUstream s2, CUdeviceptr p2)
{
    int x1 = 0, x2 = 0;
    CHECK(cuMemsetD32(p1, 0, N));
    CHECK(cuMemsetD32(p2, 0, N));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < STEPS; i++) {
        x1 = step(s1, p1, x1, 0);
        x2 = step(s2, p2, x2, 1);
        int v1, v2;
        CHECK(cuMemcpyDtoHAsync(&v1, p1, sizeof(v1), s1));
        CHECK(cuMemcpyDtoHAsync(&v2, p2, sizeof(v2), s2));
        CHECK(cuStreamSynchronize(s1));
        CHECK(cuStreamSynchronize(s2));
        REQUIRE(v1 == x1 && v2 == x2, "two streams: step %d read %d and %d, want %d and %d", i, v1,
                v2, x1, x2);
    }
    need_all(s1, p1, x1, "two streams (first)");
    need_all(s2, p2, x2, "two streams (second)");
    t_ok("two streams: %d steps each, every result right", STEPS);
}

/* A step whose first kernel writes a flag in mapped host memory: repeated with
 * synchronisations until it is well known, then its first launch alone, and the host waits
 * for the flag with no call at all. A server that held that launch for the rest of the
 * sequence must let it go by itself. */
static void host_waits(CUstream s, CUdeviceptr p)
{
    unsigned *flag;
    CHECK(cuMemHostAlloc((void **)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr dflag;
    CHECK(cuMemHostGetDevicePointer(&dflag, flag, 0));
    for (int i = 0; i < 20; i++) {
        launch_fill(s, dflag, 7, 1);
        launch_inc(s, p);
        CHECK(cuStreamSynchronize(s));
    }
    volatile unsigned *f = flag;
    *f = 0;
    launch_fill(s, dflag, 7, 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (*f == 7) break;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        REQUIRE(t1.tv_sec - t0.tv_sec < 10, "the flag was not written 10 s after its launch");
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemFreeHost(flag));
    t_ok("a launch the host waits for without a call ran by itself");
}

/* The step repeated, then a function attribute changed, then the step again: still right. */
static int attribute_between(CUstream s, CUdeviceptr p, int x)
{
    for (int i = 0; i < 10; i++)
        x = step(s, p, x, 0);
    CHECK(cuStreamSynchronize(s));
    if (g_library) {
        CUdevice dev;
        CHECK(cuCtxGetDevice(&dev));
        CHECK(cuKernelSetCacheConfig((CUkernel)f_muladd, CU_FUNC_CACHE_PREFER_L1, dev));
        CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50,
                                   (CUkernel)f_inc, dev));
    } else {
        CHECK(cuFuncSetCacheConfig(f_muladd, CU_FUNC_CACHE_PREFER_L1));
        CHECK(cuFuncSetAttribute(f_inc, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    }
    for (int i = 0; i < 10; i++)
        x = step(s, p, x, 0);
    need_all(s, p, x, "attributes changed between steps");
    t_ok("attributes changed between steps: every result right");
    return x;
}

int main(int argc, char **argv)
{
    t_init("launchseq", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = NULL;
    CUlibrary lib = NULL;
    if ((g_library = t_has_flag(argc, argv, "--library"))) {
        size_t len;
        void *image = t_read_kernel_file("kernels.ptx", &len);
        CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
        free(image);
        CUkernel k;
        CHECK(cuLibraryGetKernel(&k, lib, "inc_u32"));
        f_inc = (CUfunction)k;
        CHECK(cuLibraryGetKernel(&k, lib, "mul_add_i32"));
        f_muladd = (CUfunction)k;
        CHECK(cuLibraryGetKernel(&k, lib, "fill_u32"));
        f_fill = (CUfunction)k;
    } else {
        mod = t_load_module("kernels.ptx");
        f_inc = t_get_function(mod, "inc_u32");
        f_muladd = t_get_function(mod, "mul_add_i32");
        f_fill = t_get_function(mod, "fill_u32");
    }
    CUstream s1, s2;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p1, p2;
    CHECK(cuMemAlloc(&p1, N * sizeof(int)));
    CHECK(cuMemAlloc(&p2, N * sizeof(int)));
    CHECK(cuMemsetD32(p1, 0, N));
    CHECK(cuCtxSynchronize());

    if (t_has_flag(argc, argv, "--long")) {
        long_steps(s1, p1); /* alone: the server's log then counts its parts' replays */
    } else {
        int x = loop(s1, p1, 0, 0, "the same step");
        x = loop(s1, p1, x, 1, "a step that changes every 7th time");
        x = attribute_between(s1, p1, x);
        long_steps(s1, p1);
        two_streams(s1, p1, s2, p2);
        host_waits(s1, p1);
    }

    CHECK(cuMemFree(p1));
    CHECK(cuMemFree(p2));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuStreamDestroy(s2));
    if (mod) CHECK(cuModuleUnload(mod));
    if (lib) CHECK(cuLibraryUnload(lib));
    t_pass();
}
