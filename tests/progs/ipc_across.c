/* ipc_across A B: memory shared through an IPC handle between two processes that each see
 * one GPU of their own, as ranks bound by CUDA_VISIBLE_DEVICES do (Slurm's GPU binding):
 * the parent sets CUDA_VISIBLE_DEVICES=A, the child B, before any CUDA call. The parent
 * exports 1 MiB it filled; the child opens the handle and prints what the open answered,
 * and on success whether A's bytes read back through it.
 *
 * Natively, and through one server, the open succeeds (the driver maps the other GPU's
 * memory over NVLink or PCIe; one server aliases it). Through a server per GPU
 * (MPSSHIM_SERVER_PER_GPU=1) the two processes have different servers, and IPC between
 * servers is not carried: the open answers CUDA_ERROR_INVALID_VALUE, as a handle of no
 * process does (tests/server_per_gpu.sh checks both, and the server's log line). */
#include "tests/progs/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (1 << 20)
#define SEED 0xacc055

static void importer(const char *visible, int from_a, int to_a)
{
    setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    CUipcMemHandle h;
    REQUIRE(t_read_all(from_a, &h, sizeof h), "B: A sent no handle");
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr p = 0;
    CUresult r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("B: open: %s\n", t_errname(r));
    if (r == CUDA_SUCCESS) {
        void *host = malloc(BYTES);
        REQUIRE(host, "out of host memory");
        CHECK(cuMemcpyDtoH(host, p, BYTES));
        size_t bad = t_pattern_mismatch(host, BYTES, SEED);
        printf("B: A's bytes %s\n", bad == SIZE_MAX ? "read back" : "differ");
        CHECK(cuIpcCloseMemHandle(p));
        free(host);
    }
    fflush(stdout);
    char done = 'd';
    t_write_all(to_a, &done, 1);
    _exit(0);
}

int main(int argc, char **argv)
{
    t_init("ipc_across", 120);
    REQUIRE(argc == 3, "usage: ipc_across VISIBLE_A VISIBLE_B");
    int to_b[2], to_a[2];
    REQUIRE(pipe(to_b) == 0 && pipe(to_a) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        close(to_b[1]);
        close(to_a[0]);
        importer(argv[2], to_b[0], to_a[1]);
    }
    close(to_b[0]);
    close(to_a[1]);
    setenv("CUDA_VISIBLE_DEVICES", argv[1], 1);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    void *host = malloc(BYTES);
    REQUIRE(host, "out of host memory");
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    t_fill_pattern(host, BYTES, SEED);
    CHECK(cuMemcpyHtoD(d, host, BYTES));
    CHECK(cuCtxSynchronize());
    CUipcMemHandle h;
    CHECK(cuIpcGetMemHandle(&h, d));
    t_write_all(to_b[1], &h, sizeof h);
    char done = 0;
    REQUIRE(t_read_all(to_a[0], &done, 1) && done == 'd', "A: B never finished");
    int st = 0;
    REQUIRE(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0, "B failed (%d)", st);
    CHECK(cuMemFree(d));
    free(host);
    t_pass();
}
