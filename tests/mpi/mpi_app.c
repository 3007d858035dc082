/* mpi_app [steps]: an MPI job in the style of the legacy codes mpsshim is for. Each rank
 * takes its share of a vector, runs `steps` steps of small kernels on it (a 4-block kernel
 * that keeps the GPU busy ~75 us, then an increment of its share), copies its share back,
 * and the ranks add up their sums with MPI_Allreduce; rank 0 checks the global sum against
 * the closed form and prints the GPU loop time (slowest rank). Plain driver API + MPI:
 *     mpicc -I$CUDA/include mpi_app.c -L$CUDA/lib64/stubs -lcuda -o mpi_app
 * Kernels from $MPSSHIM_TEST_KERNELS/kernels.ptx (tests/kernels/kernels.cu). */
#include <cuda.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N (1u << 22) /* elements of the whole vector */

static int rank;

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = NULL;                                                                 \
            cuGetErrorName(r_, &n_);                                                               \
            printf("FAIL mpi_app: rank %d: %s returned %s\n", rank, #call, n_ ? n_ : "?");         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_ptx(void)
{
    const char *dir = getenv("MPSSHIM_TEST_KERNELS");
    char path[4096];
    snprintf(path, sizeof(path), "%s/kernels.ptx", dir ? dir : ".");
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL mpi_app: rank %d: cannot open %s\n", rank, path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int steps = argc > 1 ? atoi(argv[1]) : 400;

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction inc, delay;
    int ndev = 0;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&ndev));
    CK(cuDeviceGet(&dev, rank % ndev));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, read_ptx()));
    CK(cuModuleGetFunction(&inc, mod, "inc_u32"));
    CK(cuModuleGetFunction(&delay, mod, "delay_set"));

    /* This rank's share [lo, hi) of the vector, initialised to its indices. */
    unsigned lo = (unsigned)((uint64_t)N * rank / size),
             hi = (unsigned)((uint64_t)N * (rank + 1) / size);
    unsigned long long count = hi - lo;
    uint32_t *host = malloc(count * 4 + 4);
    for (unsigned i = lo; i < hi; i++)
        host[i - lo] = i;
    CUstream s;
    CUdeviceptr d, flag;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&d, count * 4 + 4));
    CK(cuMemAlloc(&flag, 4));
    CK(cuMemcpyHtoD(d, host, count * 4));
    CK(cuCtxSynchronize());

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    unsigned value = 1;
    unsigned long long ns = 75 * 1000;
    void *dargs[] = {&flag, &value, &ns}, *iargs[] = {&d, &count};
    for (int k = 0; k < steps; k++) {
        CK(cuLaunchKernel(delay, 4, 1, 1, 32, 1, 1, 0, s, dargs, NULL));
        CK(cuLaunchKernel(inc, 4, 1, 1, 256, 1, 1, 0, s, iargs, NULL));
    }
    CK(cuStreamSynchronize(s));
    double mine = now() - t0, slowest;

    CK(cuMemcpyDtoH(host, d, count * 4));
    unsigned long long sum = 0, total = 0;
    for (unsigned long long i = 0; i < count; i++)
        sum += host[i];
    MPI_Allreduce(&sum, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        /* sum over i < N of (i + steps) */
        unsigned long long want =
            (unsigned long long)N * (N - 1) / 2 + (unsigned long long)N * steps;
        printf("ranks %d, steps %d: global sum %llu, %s\n", size, steps, total,
               total == want ? "correct" : "WRONG");
        printf("gpu loop time %.4f s (slowest rank)\n", slowest);
        printf("%s mpi_app\n", total == want ? "PASS" : "FAIL");
    }
    CK(cuMemFree(d));
    CK(cuMemFree(flag));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(host);
    int ok = total == (unsigned long long)N * (N - 1) / 2 + (unsigned long long)N * steps;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
