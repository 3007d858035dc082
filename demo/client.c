/* A demo client: an ordinary CUDA driver-API program (it knows nothing of mpsshim). It
 * runs a chain of saxpy kernels on a million floats, checks every element, reports what
 * it did, then keeps its context for a moment so that the clients are seen together. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = NULL;                                                                 \
            cuGetErrorName(r_, &n_);                                                               \
            fprintf(stderr, "client %d: %s failed: %s\n", id, #call, n_ ? n_ : "?");               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int id = argc > 1 ? atoi(argv[1]) : 0;
    double linger = argc > 2 ? atof(argv[2]) : 0;
    const char *dir = argc > 3 ? argv[3] : ".";
    const int n = 1 << 20, rounds = 200;
    char path[1024];
    snprintf(path, sizeof(path), "%s/kernels.ptx", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "client %d: cannot open %s\n", id, path);
        return 1;
    }
    static char ptx[1 << 20];
    size_t len = fread(ptx, 1, sizeof(ptx) - 1, f);
    fclose(f);
    ptx[len] = '\0';

    double t0 = now();
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction saxpy;
    char name[256];
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetName(name, sizeof(name), dev));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, ptx));
    CK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) {
        x[i] = (float)(i % 100);
        y[i] = (float)id;
    }
    CUdeviceptr dx, dy;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&dx, n * sizeof(float)));
    CK(cuMemAlloc(&dy, n * sizeof(float)));
    CK(cuMemcpyHtoDAsync(dx, x, n * sizeof(float), s));
    CK(cuMemcpyHtoDAsync(dy, y, n * sizeof(float), s));
    /* y = 1 * x + y, `rounds` times: y[i] = id + rounds * x[i], exact in float. */
    float alpha = 1.0f;
    int nn = n;
    void *params[] = {&alpha, &dx, &dy, &nn};
    for (int r = 0; r < rounds; r++)
        CK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, NULL));
    CK(cuMemcpyDtoHAsync(y, dy, n * sizeof(float), s));
    CK(cuStreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += y[i] != (float)id + (float)rounds * x[i];
    double t1 = now();
    printf("client %d (pid %d): %d saxpy kernels on %d floats on %s, %s, %.0f ms\n", id,
           (int)getpid(), rounds, n, name, bad ? "WRONG RESULTS" : "all elements correct",
           (t1 - t0) * 1e3);
    fflush(stdout);
    if (linger > 0) {
        struct timespec ts = {.tv_sec = (time_t)linger,
                              .tv_nsec = (long)((linger - (time_t)linger) * 1e9)};
        nanosleep(&ts, NULL);
    }
    CK(cuMemFree(dx));
    CK(cuMemFree(dy));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(x);
    free(y);
    return bad ? 1 : 0;
}
