/* launchcost: what a launch costs the thread that makes it, by the form of the launch, and
 * the round trip of one launch and a cuStreamSynchronize in each form. The server replays a
 * client's launch as cuLaunchKernel with the packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER,
 * server/code/launch.c) where programs pass kernelParams; this says whether that form, or
 * cuLaunchKernelEx, costs the driver more (bench/NOTES.md, "Launch forms"). Run it natively
 * with and without CUDA_DEVICE_MAX_CONNECTIONS=32 (the server's).
 *
 * usage: launchcost [--batches N]
 * Prints `metric launch_<form>_us` (the median over N batches of 64 back-to-back launches,
 * per launch, each batch drained untimed) and `metric roundtrip_<form>_us` (the median of
 * 2000 launch + cuStreamSynchronize). Forms: empty (a kernel without parameters), params
 * (inc_u32, 16 bytes, kernelParams), buffer (the same, the packed buffer), ex (the same
 * through cuLaunchKernelEx, kernelParams), ex_buffer. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum form { F_EMPTY, F_PARAMS, F_BUFFER, F_EX, F_EX_BUFFER, NFORMS };
static const char *const form_names[NFORMS] = {"empty", "params", "buffer", "ex", "ex_buffer"};

struct kit {
    CUstream stream;
    CUfunction empty, inc;
    CUdeviceptr word;
    uint64_t n; /* 0: inc_u32 touches nothing */
    uint8_t packed[16];
    size_t packed_bytes;
    void *params[2];
    void *extra[5];
};

static void launch(struct kit *k, enum form f)
{
    CUlaunchConfig cfg = {.gridDimX = 1,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 32,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = k->stream};
    switch (f) {
    case F_EMPTY:
        CK(cuLaunchKernel(k->empty, 1, 1, 1, 32, 1, 1, 0, k->stream, NULL, NULL));
        break;
    case F_PARAMS:
        CK(cuLaunchKernel(k->inc, 1, 1, 1, 32, 1, 1, 0, k->stream, k->params, NULL));
        break;
    case F_BUFFER:
        CK(cuLaunchKernel(k->inc, 1, 1, 1, 32, 1, 1, 0, k->stream, NULL, k->extra));
        break;
    case F_EX:
        CK(cuLaunchKernelEx(&cfg, k->inc, k->params, NULL));
        break;
    default:
        CK(cuLaunchKernelEx(&cfg, k->inc, NULL, k->extra));
        break;
    }
}

static double median_us(uint64_t *s, int n)
{
    return bench_median_ns(s, (size_t)n) / 1e3;
}

static void measure(struct kit *k, enum form f, int batches)
{
    enum { BATCH = 64, TRIPS = 2000 };
    int most = batches > TRIPS ? batches : TRIPS;
    uint64_t *s = malloc((size_t)most * sizeof *s);
    if (!s) bench_die("out of host memory (%s)", "samples");
    char name[64];
    for (int i = 0; i < BATCH; i++) /* warm: the form's first launches */
        launch(k, f);
    CK(cuStreamSynchronize(k->stream));
    for (int b = 0; b < batches; b++) {
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < BATCH; i++)
            launch(k, f);
        s[b] = (bench_now_ns() - t0) / BATCH;
        CK(cuStreamSynchronize(k->stream));
    }
    snprintf(name, sizeof name, "launch_%s_us", form_names[f]);
    printf("metric %s %.3f us\n", name, median_us(s, batches));
    for (int i = 0; i < TRIPS; i++) {
        uint64_t t0 = bench_now_ns();
        launch(k, f);
        CK(cuStreamSynchronize(k->stream));
        s[i] = bench_now_ns() - t0;
    }
    snprintf(name, sizeof name, "roundtrip_%s_us", form_names[f]);
    printf("metric %s %.3f us\n", name, median_us(s, TRIPS));
    fflush(stdout);
    free(s);
}

static void usage(void)
{
    fprintf(stderr, "usage: launchcost [--batches N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    bench_prog = "launchcost";
    int batches = 400;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batches") == 0)
            batches = (int)bench_num_arg(argc, argv, i++, 1, 100000, usage);
        else
            usage();
    }
    CUdevice dev;
    bench_use_device(0, &dev);
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("# launchcost: %d batches, CUDA_DEVICE_MAX_CONNECTIONS=%s\n", batches,
           conn ? conn : "(unset)");
    struct kit k = {0};
    CUmodule mod;
    k.empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx",
                                  "empty_kernel", &mod);
    CK(cuModuleGetFunction(&k.inc, mod, "inc_u32"));
    CK(cuMemAlloc(&k.word, 4));
    CK(cuStreamCreate(&k.stream, CU_STREAM_NON_BLOCKING));
    k.params[0] = &k.word;
    k.params[1] = &k.n;
    memcpy(k.packed, &k.word, 8);
    memcpy(k.packed + 8, &k.n, 8);
    k.packed_bytes = sizeof k.packed;
    k.extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    k.extra[1] = k.packed;
    k.extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    k.extra[3] = &k.packed_bytes;
    k.extra[4] = CU_LAUNCH_PARAM_END;
    for (int f = 0; f < NFORMS; f++)
        measure(&k, (enum form)f, batches);
    CK(cuStreamDestroy(k.stream));
    CK(cuMemFree(k.word));
    printf("PASS launchcost\n");
    return 0;
}
