/* ncclish: the driver calls of a two-process, two-GPU NCCL run from init to its first
 * collective, without NCCL (the list of calls and where NCCL makes them: issue 30).
 *
 * The process forks before any CUDA call; rank r runs on device r. Each rank asks the device
 * attributes NCCL asks, makes exportable physical memory on its device (cuMemCreate with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), maps it with access for both devices, and sends
 * its descriptor to the other from another thread (NCCL's proxy) over a Unix socket
 * (SCM_RIGHTS); the other imports it and maps it with access for its OWN device, although the
 * memory lies on the peer's (p2p.cc's import). Also
 * a legacy IPC handle of cuMemAlloc memory opened with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
 * host-pinned mapped memory reached by a kernel (NCCL's work FIFO), and a kernel taken as
 * cudart takes it (library, kernel, cuKernelSetAttribute of its dynamic shared memory,
 * cuKernelGetFunction) launched with cuLaunchKernelEx, NCCL's attributes (cluster, cluster
 * scheduling, memory synchronisation domain), more dynamic shared memory than the default
 * and its parameters in an `extra` buffer, writing into the peer's memory. A rank then copies
 * into the peer's memory and tells it with cuStreamWriteValue32 on a flag there, on which the
 * peer's stream waits (cuStreamWaitValue32) before it reads what it was sent; and the CE
 * collectives' sync: a copy into the peer's flag, waited for by cuStreamBatchMemOp. Every
 * element is checked; both tear down in NCCL's order.
 *
 * --vmm-only leaves out the legacy IPC handle: the CPU test driver keeps a process's
 * cuMemAlloc memory to itself, so that part runs natively only on a GPU (programs.txt).
 * --kill: rank 1 dies once both imported (survive, below).
 * Rank 1's lines are printed after rank 0's (they run at once: the order of their lines
 * would depend on timing). Skips (77) with fewer than two devices. */
#include "tests/progs/common.h"
#include "tests/progs/nccl_attrs.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED_KERNEL 0x4b000u /* + rank: its kernel into the peer's physical memory */
#define SEED_LOCAL 0x4c000u  /* + rank: its own cuMemAlloc memory, copied to the peer */
#define SEED_IPC 0x4d000u    /* + rank: its kernel into the peer's IPC-opened memory */
#define SEED_FIFO 0x4e000u   /* + rank: its kernel into its host-pinned FIFO */
#define SEED_WORK 0x4f000u   /* + rank: the host into its FIFO, for its kernel to read */
#define FIFO_BYTES 65536u    /* a half the device writes, a half it reads, an error count */
#define FIFO_HALF (FIFO_BYTES / 2)
#define SMEM (64u << 10) /* beyond the 48 KiB a kernel gets without asking */
#define CLUSTER 2u
#define GRID 4u /* a multiple of CLUSTER, as NCCL makes its grid */
#define BLOCK 256u

struct rank {
    int r, sock, legacy, kill;
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    size_t g, vbytes, part; /* granularity, physical allocation, one part of it */
    CUmemGenericAllocationHandle h;
    CUdeviceptr va, peer_va, local, ipc_peer;
    void *fifo, *host;
    CUlibrary lib;
    CUfunction fn, check;
};

/* Flag words, in the last 256 bytes of a rank's physical memory: the kernels' flag, the CE
 * collectives' flag and the sequence number copied into the peer's. */
enum { FLAG, CE_FLAG, CE_SEQ };
static CUdeviceptr word_in(const struct rank *k, CUdeviceptr base, int which)
{
    return base + k->vbytes - 256 + 4 * (CUdeviceptr)which;
}

static void attributes(struct rank *k)
{
    /* What NCCL asks before it picks its transport and allocator (init.c, cudawrap.cc,
     * nvls.cc, p2p.cc): the values themselves are the machine's, not printed. */
    static const CUdevice_attribute asked[] = {
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR,
    };
    int v[sizeof(asked) / sizeof(asked[0])];
    for (size_t i = 0; i < sizeof(asked) / sizeof(asked[0]); i++)
        CHECK(cuDeviceGetAttribute(&v[i], asked[i], k->dev));
    REQUIRE(v[2] == 1 && v[3] == 1, "rank %d: no VMM or no POSIX descriptors (%d %d)", k->r, v[2],
            v[3]);
    if (v[5]) { /* multicast said to be there: NCCL's first multicast call must be served */
        CUmulticastObjectProp mp = {.numDevices = 2,
                                    .size = 2u << 20,
                                    .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
        size_t gran = 0;
        CHECK(cuMulticastGetGranularity(&gran, &mp, CU_MULTICAST_GRANULARITY_RECOMMENDED));
    }
    CUdevice peer;
    int can = -1, perf = -1;
    CHECK(cuDeviceGet(&peer, 1 - k->r));
    CHECK(cuDeviceCanAccessPeer(&can, k->dev, peer));
    if (!can)
        t_skip("device %d cannot reach device %d (NCCL would use host memory)", k->r, 1 - k->r);
    CHECK(cuDeviceGetP2PAttribute(&perf, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, k->dev, peer));
    t_ok("rank %d: the device attributes NCCL asks", k->r);
}

static CUmemAllocationProp prop_of(int dev)
{
    return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
}

static void grant(const struct rank *k, CUdeviceptr va, int dev)
{
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, k->vbytes, &d, 1));
}

/* Reserves addresses for h and maps it there, read-write for this rank's device. */
static CUdeviceptr map_for_me(const struct rank *k, CUmemGenericAllocationHandle h)
{
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, k->vbytes, k->g, 0, 0));
    CHECK(cuMemMap(va, k->vbytes, 0, h, 0));
    grant(k, va, k->r);
    return va;
}

/* ncclCuMemAlloc: the rank's own physical memory, zeroed. */
static void own_memory(struct rank *k)
{
    CUmemAllocationProp p = prop_of(k->r);
    CHECK(cuMemGetAllocationGranularity(&k->g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    k->vbytes = 2 * k->g;
    k->part = k->g / 2;
    CHECK(cuMemCreate(&k->h, k->vbytes, &p, 0));
    k->va = map_for_me(k, k->h);
    /* ncclCuMemAlloc grants every device that can reach this one access to its mapping. */
    CUdevice peer;
    int can = 0;
    CHECK(cuDeviceGet(&peer, 1 - k->r));
    CHECK(cuDeviceCanAccessPeer(&can, peer, k->dev));
    if (can) grant(k, k->va, 1 - k->r);
    CHECK(cuMemsetD32Async(k->va, 0, k->vbytes / 4, k->st));
    CHECK(cuMemAlloc(&k->local, 2 * k->part));
    CHECK(cuMemsetD32Async(k->local, 0, 2 * k->part / 4, k->st));
    CHECK(cuStreamSynchronize(k->st));
    t_ok("rank %d: exportable physical memory made and mapped", k->r);
}

/* NCCL's proxy thread exports the descriptor its peer asks for (proxy.cc, proxyGetFd) and
 * sends it over its Unix socket (ipcsocket.cc): another thread of the owning process. */
static void *proxy_export(void *arg)
{
    const struct rank *k = arg;
    int fd = -1;
    CHECK(cuCtxSetCurrent(k->ctx));
    CHECK(cuMemExportToShareableHandle(&fd, k->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    t_send_fd(k->sock, fd);
    close(fd);
    return NULL;
}

/* p2p.cc's import: the peer's descriptor, mapped for this rank's device. */
static void import_peer(struct rank *k)
{
    pthread_t proxy;
    REQUIRE(pthread_create(&proxy, NULL, proxy_export, k) == 0, "pthread_create");
    REQUIRE(pthread_join(proxy, NULL) == 0, "pthread_join");
    int pfd = t_recv_fd(k->sock);
    CUmemGenericAllocationHandle ph;
    CHECK(cuMemImportFromShareableHandle(&ph, (void *)(intptr_t)pfd,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(pfd);
    /* Ranks moved to their GPUs' own servers (MPSSHIM_SERVER_PER_GPU_MOVE) too: the importing
     * server's driver cannot name another server's GPU, so the shim answers from the
     * properties the descriptor carried (interpose/physical.c). */
    CUmemAllocationProp got;
    memset(&got, 0, sizeof(got));
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, ph));
    REQUIRE(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 1 - k->r,
            "rank %d: the peer's memory says device %d", k->r, got.location.id);
    k->peer_va = map_for_me(k, ph);
    CHECK(cuMemRelease(ph)); /* lives on with its mapping, as NCCL leaves it */
    CUmemLocation where = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = k->r};
    unsigned long long flags = 0;
    CHECK(cuMemGetAccess(&flags, &where, k->peer_va));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "rank %d: access %llu", k->r, flags);
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, k->peer_va));
    REQUIRE(type == CU_MEMORYTYPE_DEVICE, "rank %d: the peer's memory has type %u", k->r, type);
    /* Buffer registration (ncclIpcLocalRegisterBuffer) finds a pointer's allocation first. */
    CUdeviceptr base = 0;
    size_t size = 0;
    CHECK(cuMemGetAddressRange(&base, &size, k->peer_va + k->g + 4096));
    REQUIRE(base == k->peer_va && size == k->vbytes,
            "rank %d: the peer mapping's range is %zu bytes", k->r, size);
    CHECK(cuMemGetAddressRange(&base, &size, k->va + 100));
    REQUIRE(base == k->va && size == k->vbytes, "rank %d: its own mapping's range is %zu bytes",
            k->r, size);
    int ordinal = -1;
    CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, k->va));
    REQUIRE(ordinal == k->r, "rank %d: its memory says device %d", k->r, ordinal);
    t_ok("rank %d: the peer's memory imported and mapped for its own device", k->r);
}

/* Legacy IPC (p2p.cc without cuMem): cuMemAlloc memory by its 64-byte handle. */
static void open_legacy(struct rank *k)
{
    CUipcMemHandle mine, theirs;
    CHECK(cuIpcGetMemHandle(&mine, k->local));
    t_write_all(k->sock, &mine, sizeof(mine));
    REQUIRE(t_read_all(k->sock, &theirs, sizeof(theirs)), "rank %d: no IPC handle", k->r);
    CHECK(cuIpcOpenMemHandle(&k->ipc_peer, theirs, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    t_ok("rank %d: the peer's cuMemAlloc memory opened by its IPC handle", k->r);
}

/* cudart's way to a kernel (CUDA 12 loads through libraries), and NCCL's shared memory. */
static void kernel(struct rank *k)
{
    size_t len;
    void *image = t_read_kernel_file("kernels.ptx", &len);
    CUkernel kern;
    CHECK(cuLibraryLoadData(&k->lib, image, NULL, NULL, 0, NULL, NULL, 0));
    free(image);
    CHECK(cuLibraryGetKernel(&kern, k->lib, "write_pattern"));
    /* cudaFuncGetAttributes (ncclInitKernelsForDevice) meets the function first and cudart
     * keeps it: the attribute set afterwards on the kernel for this device is the function's
     * too, and the launch goes to the function met first. */
    int stat = -1;
    CHECK(cuKernelGetFunction(&k->fn, kern));
    CHECK(cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->fn));
    CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)SMEM, kern,
                               k->dev));
    int smem = 0;
    CHECK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k->fn));
    CHECK(cuLibraryGetKernel(&kern, k->lib, "check_pattern"));
    CHECK(cuKernelGetFunction(&k->check, kern));
    REQUIRE(smem == (int)SMEM, "rank %d: the function allows %d bytes", k->r, smem);
    t_ok("rank %d: the kernel's function with its dynamic shared memory raised", k->r);
}

/* write_pattern(p, n, seed) as ncclLaunchKernel launches: cuLaunchKernelEx, parameters in
 * an `extra` buffer, NCCL's attributes. */
static void launch(const struct rank *k, CUdeviceptr p, size_t bytes, unsigned seed)
{
    struct args {
        CUdeviceptr p;
        unsigned long long n;
        unsigned seed;
    } args = {p, bytes / 4, seed};
    size_t size = offsetof(struct args, seed) + sizeof(args.seed); /* the kernel's 20 bytes */
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUlaunchAttribute a[3];
    unsigned nattrs = nccl_launch_attrs(a, CLUSTER);
    CUlaunchConfig cfg = {.gridDimX = GRID,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = BLOCK,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .sharedMemBytes = SMEM,
                          .hStream = k->st,
                          .attrs = a,
                          .numAttrs = nattrs};
    CHECK(cuLaunchKernelEx(&cfg, k->fn, NULL, extra));
}

/* The collective: kernels and a copy into the peer's memory, then its flag raised. */
static void send_to_peer(struct rank *k)
{
    unsigned me = (unsigned)k->r;
    /* ncclCudaHostCalloc's work FIFO: the device reaches it at its host address (unified
     * addressing, init.cc: workFifoBufDev = workFifoBuf), and reads what the host wrote. */
    CUdeviceptr fifo_d = 0;
    CHECK(cuMemHostAlloc(&k->fifo, FIFO_BYTES, CU_MEMHOSTALLOC_DEVICEMAP));
    CHECK(cuMemHostGetDevicePointer(&fifo_d, k->fifo, 0));
    REQUIRE(fifo_d == (CUdeviceptr)(uintptr_t)k->fifo, "rank %d: the FIFO's device address differs",
            k->r);
    t_fill_pattern((char *)k->fifo + FIFO_HALF, FIFO_HALF - 64, SEED_WORK + me);
    unsigned *errors = (unsigned *)((char *)k->fifo + FIFO_BYTES - 4);
    *errors = 0;
    CUdeviceptr work = fifo_d + FIFO_HALF, count = (CUdeviceptr)(uintptr_t)errors;
    unsigned long long words = (FIFO_HALF - 64) / 4;
    unsigned seed = SEED_WORK + me;
    void *params[] = {&work, &words, &seed, &count};
    CHECK(cuLaunchKernel(k->check, GRID, 1, 1, BLOCK, 1, 1, 0, k->st, params, NULL));
    launch(k, fifo_d, FIFO_HALF, SEED_FIFO + me);
    launch(k, k->local, k->part, SEED_LOCAL + me);
    launch(k, k->peer_va, k->part, SEED_KERNEL + me);
    if (k->legacy) launch(k, k->ipc_peer + k->part, k->part, SEED_IPC + me);
    CHECK(cuMemcpyDtoDAsync(k->peer_va + k->g, k->local, k->part, k->st));
    /* The write's default barrier orders the work before it ahead of the flag. */
    CHECK(cuStreamWriteValue32(k->st, word_in(k, k->peer_va, FLAG), 1,
                               CU_STREAM_WRITE_VALUE_DEFAULT));
    /* The CE collectives' sync (ce_coll.cc, ncclPrepUCSync): a sequence number written to
     * its own memory, then copied into the peer's flag. */
    CHECK(cuStreamWriteValue32(k->st, word_in(k, k->va, CE_SEQ), 2, CU_STREAM_WRITE_VALUE_DEFAULT));
    CHECK(cuMemcpyDtoDAsync(word_in(k, k->peer_va, CE_FLAG), word_in(k, k->va, CE_SEQ), 4, k->st));
    t_ok("rank %d: kernels and a copy into the peer's memory, its flags raised", k->r);
}

static void expect_pattern(const struct rank *k, CUdeviceptr p, size_t bytes, unsigned seed,
                           const char *what)
{
    CHECK(cuMemcpyDtoHAsync(k->host, p, bytes, k->st));
    CHECK(cuStreamSynchronize(k->st));
    size_t bad = t_pattern_mismatch(k->host, bytes, seed);
    REQUIRE(bad == SIZE_MAX, "rank %d: %s, byte %zu differs", k->r, what, bad);
}

/* Waits (on the stream) for the peer's flag, then checks every element it was sent. */
static void receive(struct rank *k)
{
    unsigned peer = 1u - (unsigned)k->r;
    CHECK(cuStreamWaitValue32(k->st, word_in(k, k->va, FLAG), 1, CU_STREAM_WAIT_VALUE_GEQ));
    /* ncclMemOpSync waits for its peers' flags in one batch of memory operations. */
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof(op));
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = word_in(k, k->va, CE_FLAG);
    op.waitValue.value = 2;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    CHECK(cuStreamBatchMemOp(k->st, 1, &op, 0));
    REQUIRE((k->host = malloc(k->part)), "out of host memory");
    expect_pattern(k, k->va, k->part, SEED_KERNEL + peer, "the peer's kernel");
    expect_pattern(k, k->va + k->g, k->part, SEED_LOCAL + peer, "the peer's copy");
    if (k->legacy)
        expect_pattern(k, k->local + k->part, k->part, SEED_IPC + peer, "the peer's IPC kernel");
    size_t bad = t_pattern_mismatch(k->fifo, FIFO_HALF, SEED_FIFO + (unsigned)k->r);
    REQUIRE(bad == SIZE_MAX, "rank %d: the FIFO's byte %zu differs", k->r, bad);
    unsigned errors = *(volatile unsigned *)((char *)k->fifo + FIFO_BYTES - 4);
    REQUIRE(errors == 0, "rank %d: the kernel read %u words of the FIFO wrong", k->r, errors);
    t_ok("rank %d: everything the peer sent, element by element, and its own FIFO", k->r);
}

/* Both ranks done with each other's memory before either lets go of its own. */
static void barrier(const struct rank *k)
{
    char c = 'b';
    if (k->kill) return; /* no peer to wait for */
    t_write_all(k->sock, &c, 1);
    REQUIRE(t_read_all(k->sock, &c, 1) && c == 'b', "rank %d: the peer is gone", k->r);
}

static void teardown(struct rank *k)
{
    CHECK(cuCtxSynchronize());
    barrier(k);
    if (k->legacy) CHECK(cuIpcCloseMemHandle(k->ipc_peer));
    CHECK(cuMemUnmap(k->peer_va, k->vbytes));
    CHECK(cuMemAddressFree(k->peer_va, k->vbytes));
    barrier(k);
    /* ncclCuMemFree: the mapping, its addresses, then the handle. */
    CHECK(cuMemUnmap(k->va, k->vbytes));
    CHECK(cuMemAddressFree(k->va, k->vbytes));
    CHECK(cuMemRelease(k->h));
    /* The rest as a communicator's destruction and the process's exit leave it. */
    CHECK(cuMemFree(k->local));
    if (k->fifo) CHECK(cuMemFreeHost(k->fifo));
    free(k->host);
    CHECK(cuLibraryUnload(k->lib));
    CHECK(cuStreamDestroy(k->st));
    CHECK(cuDevicePrimaryCtxRelease(k->dev));
    t_ok("rank %d: torn down", k->r);
}

/* --kill: rank 1 dies holding its mapping of rank 0's memory, its own memory exported and
 * mapped by rank 0 (and the IPC handles of both); rank 0's memory must stay its own, working,
 * and everything must still be let go cleanly. */
static void survive(struct rank *k)
{
    char c = 'i'; /* rank 0 imported too: rank 1 may die */
    if (k->r == 1) {
        REQUIRE(t_read_all(k->sock, &c, 1) && c == 'i', "rank 1: rank 0 is gone");
        fflush(stdout);
        raise(SIGKILL);
    }
    t_write_all(k->sock, &c, 1);
    REQUIRE(!t_read_all(k->sock, &c, 1), "rank 0: rank 1 did not die");
    t_ok("rank 0: the peer died holding its mapping of this rank's memory");
    kernel(k);
    REQUIRE((k->host = malloc(k->part)), "out of host memory");
    launch(k, k->va, k->part, SEED_KERNEL);
    expect_pattern(k, k->va, k->part, SEED_KERNEL, "its own memory after the peer died");
    /* The peer's physical memory lives on with this rank's mapping of it, as the driver
     * keeps memory while it is mapped. */
    launch(k, k->peer_va, k->part, SEED_LOCAL);
    expect_pattern(k, k->peer_va, k->part, SEED_LOCAL, "the dead peer's memory");
    t_ok("rank 0: its memory and its mapping of the dead peer's written and read");
    teardown(k);
}

static void rank_main(int r, int sock, int legacy, int kill)
{
    struct rank k = {.r = r, .sock = sock, .legacy = legacy, .kill = kill};
    CHECK(cuInit(0));
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("needs two devices, found %d", n);
    CHECK(cuDeviceGet(&k.dev, r));
    CHECK(cuDevicePrimaryCtxRetain(&k.ctx, k.dev));
    CHECK(cuCtxSetCurrent(k.ctx));
    CHECK(cuStreamCreate(&k.st, CU_STREAM_NON_BLOCKING));
    attributes(&k);
    own_memory(&k);
    import_peer(&k);
    if (legacy) open_legacy(&k);
    if (kill) {
        survive(&k);
        return;
    }
    kernel(&k);
    send_to_peer(&k);
    receive(&k);
    teardown(&k);
}

/* Rank 1, in the child: its lines go to `out` for rank 0 to print after its own. */
static void child(const int sv[2], const int out[2], int legacy, int kill)
{
    close(sv[0]);
    close(out[0]);
    REQUIRE(dup2(out[1], STDOUT_FILENO) >= 0, "dup2: %s", strerror(errno));
    close(out[1]);
    t_init("ncclish", 120); /* a child has no alarm of its parent's */
    rank_main(1, sv[1], legacy, kill);
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv)
{
    t_init("ncclish", 120);
    int legacy = !t_has_flag(argc, argv, "--vmm-only"), kill = t_has_flag(argc, argv, "--kill");
    int sv[2], out[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && pipe(out) == 0,
            "socketpair or pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) child(sv, out, legacy, kill);
    close(sv[1]);
    close(out[1]);
    rank_main(0, sv[0], legacy, kill);
    char buf[4096];
    ssize_t got;
    while ((got = read(out[0], buf, sizeof(buf))) > 0)
        fwrite(buf, 1, (size_t)got, stdout);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    if (kill)
        REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rank 1 lived (status %d)",
                status);
    else
        REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed (status %d)", status);
    t_pass();
}
