/* ipc_across [--vmm | --big | --event] [--leave] A B: memory shared between two processes that each
 * see one GPU of their own, as ranks bound by CUDA_VISIBLE_DEVICES do (Slurm's GPU binding): the
 * parent sets CUDA_VISIBLE_DEVICES=A, the child B, before any CUDA call. The parent exports memory
 * it filled; the child opens it, prints what the open answered and, on success, whether the
 * parent's bytes read back through it; with a legacy handle it then writes a mark there,
 * which the parent looks for once the child closed it.
 *
 *   (default)  1 MiB of cuMemAlloc by its legacy IPC handle (cuIpcGetMemHandle /
 *              cuIpcOpenMemHandle).
 *   --big      the same with 4 MiB.
 *   --leave    the child exits with the legacy handle still open (its server lets go).
 *   --vmm      physical memory of cuMemCreate by a POSIX descriptor
 *              (cuMemExportToShareableHandle, SCM_RIGHTS, cuMemImportFromShareableHandle),
 *              mapped in the child for its own device, as NCCL's ranks share their buffers.
 *   --handle A alone, no child: 1 MiB of cuMemAlloc on A, its legacy IPC handle printed in hex
 *              with this process's pid, held until a line arrives on stdin (for a test that
 *              asks the server with it itself: tests/server_per_gpu.sh).
 *   --event    an interprocess event (cuIpcGetEventHandle / cuIpcOpenEventHandle), as
 *              torch.multiprocessing passes with a CUDA tensor: the parent records it behind a
 *              stream wait it releases later; the child opens it and prints its query before
 *              the release (not ready), then after a stream's wait on it and its
 *              synchronisation (success).
 *
 * Natively, and through one server, both open (the driver maps the other GPU's memory over
 * NVLink or PCIe; one server aliases it). Through a server per GPU (MPSSHIM_SERVER_PER_GPU=1)
 * the two processes have different servers: the descriptor is carried between them (the
 * child's server fetches the driver's own from the parent's: server/memory/ipcpeer.c), and so
 * is the legacy handle of 4 MiB (the parent's server maps more than 1 MiB on its own, and
 * passes that mapping's descriptor: server/memory/arena.c, ipc.c); the legacy handle of
 * 1 MiB is not, since its mapping holds other clients' memory, and its open answers
 * CUDA_ERROR_INVALID_VALUE; so is the event (the parent's server, a GPU's, made it
 * interprocess and passes the driver's own handle of it: server/core/events.c, ipc.c)
 * (tests/server_per_gpu.sh checks all of these). */
#include "tests/progs/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 0xacc055
#define MARK 0x5a    /* what B writes into the memory it opened, */
#define MARKED 4096u /* this many bytes, for A to read back */

static int vmm, leave, event;
static size_t bytes = 1 << 20; /* --big: 4 MiB */

/* Reads the shared bytes at p and says whether they are the parent's. */
static void read_back(CUdeviceptr p)
{
    void *host = malloc(bytes);
    REQUIRE(host, "out of host memory");
    CHECK(cuMemcpyDtoH(host, p, bytes));
    size_t bad = t_pattern_mismatch(host, bytes, SEED);
    printf("B: A's bytes %s\n", bad == SIZE_MAX ? "read back" : "differ");
    free(host);
}

static CUmemAllocationProp prop(void)
{
    return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
}

/* The mapping of h at new addresses, read-write for this process's device 0. */
static CUdeviceptr map(CUmemGenericAllocationHandle h, size_t size)
{
    CUdeviceptr va;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemMap(va, size, 0, h, 0));
    CHECK(cuMemSetAccess(va, size, &d, 1));
    return va;
}

/* The child's side of --event: opens the parent's event, queries it, lets the parent release
 * its record ('q'), then waits for it on a stream of its own and synchronises with it. */
static void open_event(int sock)
{
    CUipcEventHandle h;
    REQUIRE(t_read_all(sock, &h, sizeof h), "B: A sent no event handle");
    CUevent e = NULL;
    CUresult r = cuIpcOpenEventHandle(&e, h);
    printf("B: open event: %s\n", t_errname(r));
    CUresult before = r == CUDA_SUCCESS ? cuEventQuery(e) : r;
    char go = 'q';
    t_write_all(sock, &go, 1);
    if (r != CUDA_SUCCESS) return;
    printf("B: before its release: %s\n", t_errname(before));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamWaitEvent(s, e, 0));
    printf("B: a stream's wait: %s\n", t_errname(cuStreamSynchronize(s)));
    CUresult sync = cuEventSynchronize(e);
    printf("B: after: %s, %s\n", t_errname(sync), t_errname(cuEventQuery(e)));
    CHECK(cuStreamDestroy(s));
    CHECK(cuEventDestroy(e));
}

static void importer(const char *visible, int sock)
{
    setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUresult r;
    if (event) {
        open_event(sock);
    } else if (vmm) {
        size_t size = 0;
        REQUIRE(t_read_all(sock, &size, sizeof size), "B: A sent no size");
        int fd = t_recv_fd(sock);
        CUmemGenericAllocationHandle h = 0;
        r = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        printf("B: import: %s\n", t_errname(r));
        if (r == CUDA_SUCCESS) {
            CUdeviceptr va = map(h, size);
            read_back(va);
            CHECK(cuMemUnmap(va, size));
            CHECK(cuMemAddressFree(va, size));
            CHECK(cuMemRelease(h));
        }
    } else {
        CUipcMemHandle h;
        REQUIRE(t_read_all(sock, &h, sizeof h), "B: A sent no handle");
        CUdeviceptr p = 0;
        r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        printf("B: open: %s\n", t_errname(r));
        if (r == CUDA_SUCCESS) {
            read_back(p);
            CHECK(cuMemsetD8(p, MARK, MARKED)); /* for A to see */
            CHECK(cuCtxSynchronize());
            if (!leave) CHECK(cuIpcCloseMemHandle(p)); /* --leave: its server lets go */
        }
    }
    fflush(stdout);
    char done = 'd';
    t_write_all(sock, &done, 1);
    _exit(0);
}

/* The parent's side of --event: an interprocess event recorded on a stream held by a wait on
 * a device word, released once the child has queried it. */
static void export_event(int sock, pid_t b)
{
    CUstream s, other;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUdeviceptr word;
    CHECK(cuMemAlloc(&word, 4));
    CHECK(cuMemsetD32(word, 0, 1));
    CHECK(cuCtxSynchronize());
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
    CHECK(cuStreamWaitValue32(s, word, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK(cuEventRecord(e, s));
    CUipcEventHandle h;
    CHECK(cuIpcGetEventHandle(&h, e));
    t_write_all(sock, &h, sizeof h);
    char go = 0;
    REQUIRE(t_read_all(sock, &go, 1) && go == 'q', "A: B never queried the event");
    CHECK(cuMemsetD32Async(word, 1, 1, other)); /* releases the record */
    char done = 0;
    REQUIRE(t_read_all(sock, &done, 1) && done == 'd', "A: B never finished");
    int st = 0;
    REQUIRE(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0, "B failed (%d)", st);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventDestroy(e));
    CHECK(cuMemFree(word));
    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(other));
}

int main(int argc, char **argv)
{
    t_init("ipc_across", 120);
    if (argc == 3 && strcmp(argv[1], "--handle") == 0) {
        setenv("CUDA_VISIBLE_DEVICES", argv[2], 1);
        CUdevice dev;
        CUcontext ctx;
        CUdeviceptr d = 0;
        CUipcMemHandle ih;
        t_setup(&dev, &ctx);
        CHECK(cuMemAlloc(&d, bytes));
        CHECK(cuIpcGetMemHandle(&ih, d));
        printf("handle ");
        for (size_t i = 0; i < sizeof(ih.reserved); i++)
            printf("%02x", (unsigned char)ih.reserved[i]);
        printf("\npid %d\n", (int)getpid());
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof(line), stdin)) line[0] = '\0';
        CHECK(cuMemFree(d));
        t_pass();
    }
    vmm = t_has_flag(argc, argv, "--vmm");
    int big = t_has_flag(argc, argv, "--big");
    leave = t_has_flag(argc, argv, "--leave");
    event = t_has_flag(argc, argv, "--event");
    if (big) bytes = 4 << 20;
    int flags = vmm + big + leave + event;
    REQUIRE(argc == 3 + flags && vmm + big + event <= 1 && !(leave && (vmm || event)),
            "usage: ipc_across [--vmm | --big | --event] [--leave] VISIBLE_A VISIBLE_B");
    const char *va = argv[1 + flags], *vb = argv[2 + flags];
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        close(sv[0]);
        importer(vb, sv[1]);
    }
    close(sv[1]);
    setenv("CUDA_VISIBLE_DEVICES", va, 1);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    void *host = malloc(bytes);
    REQUIRE(host, "out of host memory");
    t_fill_pattern(host, bytes, SEED);
    if (event) {
        export_event(sv[0], b);
        free(host);
        t_pass();
    }
    CUdeviceptr d = 0;
    CUmemGenericAllocationHandle h = 0;
    size_t size = 0;
    if (vmm) {
        CUmemAllocationProp p = prop();
        size_t g = 0;
        CHECK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        size = (bytes + g - 1) / g * g;
        CHECK(cuMemCreate(&h, size, &p, 0));
        d = map(h, size);
    } else {
        CHECK(cuMemAlloc(&d, bytes));
    }
    CHECK(cuMemcpyHtoD(d, host, bytes));
    CHECK(cuCtxSynchronize());
    if (vmm) {
        int fd = -1;
        CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        t_write_all(sv[0], &size, sizeof size);
        t_send_fd(sv[0], fd);
        close(fd);
    } else {
        CUipcMemHandle ih;
        CHECK(cuIpcGetMemHandle(&ih, d));
        t_write_all(sv[0], &ih, sizeof ih);
    }
    char done = 0;
    REQUIRE(t_read_all(sv[0], &done, 1) && done == 'd', "A: B never finished");
    int st = 0;
    REQUIRE(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0, "B failed (%d)", st);
    if (vmm) {
        CHECK(cuMemUnmap(d, size));
        CHECK(cuMemAddressFree(d, size));
        CHECK(cuMemRelease(h));
    } else {
        unsigned char seen[MARKED];
        CHECK(cuMemcpyDtoH(seen, d, MARKED));
        size_t i = 0;
        while (i < MARKED && seen[i] == MARK)
            i++;
        printf("A: B's writes %s\n", i == MARKED ? "seen" : "not seen");
        CHECK(cuMemFree(d));
    }
    free(host);
    t_pass();
}
