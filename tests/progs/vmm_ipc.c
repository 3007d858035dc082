/* vmm_ipc: physical memory shared between two processes as a POSIX file descriptor.
 *
 * The process forks before any CUDA call. A creates exportable physical memory, maps it in
 * a reservation of its own, fills it and passes the descriptor of
 * cuMemExportToShareableHandle to B over a Unix socket; B imports it, maps it in its own
 * reservation, checks A's bytes and writes its own, which A then reads through its
 * mapping. Also: memory not made exportable has no descriptor; cuMemRetainAllocationHandle
 * gives back the handle of a mapping, released once more. Same output natively and
 * through the shim. */
#include "tests/progs/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED_A 0x7a7a7
#define SEED_B 0x7b7b7

static CUmemAllocationProp prop_of(int exportable)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    if (exportable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* Reserves `bytes` of addresses, maps h there read-write for device 0. */
static CUdeviceptr map_in(CUmemGenericAllocationHandle h, size_t bytes)
{
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, bytes, 0, 0, 0));
    CHECK(cuMemMap(va, bytes, 0, h, 0));
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, bytes, &d, 1));
    return va;
}

static void unmap(CUdeviceptr va, size_t bytes)
{
    CHECK(cuMemUnmap(va, bytes));
    CHECK(cuMemAddressFree(va, bytes));
}

static size_t granule(void)
{
    CUmemAllocationProp p = prop_of(1);
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return g;
}

static void importer(int sock)
{
    CUdevice dev;
    CUcontext ctx;
    int fd = t_recv_fd(sock);
    t_setup(&dev, &ctx);
    size_t bytes = 2 * granule();
    void *host = malloc(bytes);
    REQUIRE(host, "out of host memory");
    CUmemGenericAllocationHandle h, again, kept;
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CHECK(cuMemImportFromShareableHandle(&again, (void *)(intptr_t)fd,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CHECK(cuMemRelease(again));
    t_ok("B: imported the descriptor (twice, one released)");
    CUdeviceptr va = map_in(h, bytes);
    CHECK(cuMemcpyDtoH(host, va, bytes));
    size_t bad = t_pattern_mismatch(host, bytes, SEED_A);
    REQUIRE(bad == SIZE_MAX, "B: A's bytes, byte %zu differs", bad);
    t_ok("B: A's bytes through its own mapping");
    CHECK(cuMemRetainAllocationHandle(&kept, (void *)(uintptr_t)va));
    CHECK(cuMemRelease(kept));
    t_fill_pattern(host, bytes, SEED_B);
    CHECK(cuMemcpyHtoD(va, host, bytes));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemRelease(h)); /* released while mapped: lives on with the mapping */
    t_write_all(sock, "w", 1);
    char c;
    REQUIRE(t_read_all(sock, &c, 1) && c == 'r', "B: A did not answer");
    unmap(va, bytes);
    close(fd);
    t_ok("B: wrote its bytes, unmapped and released");
    free(host);
    t_pass();
}

static void exporter(int sock, pid_t b)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    size_t bytes = 2 * granule();
    void *host = malloc(bytes);
    REQUIRE(host, "out of host memory");
    CUmemAllocationProp p = prop_of(0);
    CUmemGenericAllocationHandle plain, h, kept;
    int fd = -1;
    CHECK(cuMemCreate(&plain, bytes, &p, 0));
    EXPECT_ERR(
        cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(cuMemRelease(plain));
    t_ok("A: memory not made exportable has no descriptor");
    p = prop_of(1);
    CHECK(cuMemCreate(&h, bytes, &p, 0));
    CUdeviceptr va = map_in(h, bytes);
    t_fill_pattern(host, bytes, SEED_A);
    CHECK(cuMemcpyHtoD(va, host, bytes));
    /* From pageable memory the copy may still be on its way when cuMemcpyHtoD returns:
     * another process sees the bytes only after a synchronisation. */
    CHECK(cuCtxSynchronize());
    CHECK(cuMemRetainAllocationHandle(&kept, (void *)(uintptr_t)(va + bytes / 2)));
    REQUIRE(kept == h, "A: the retained handle is another one");
    CHECK(cuMemRelease(kept));
    t_ok("A: the mapping's handle retained and released");
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    t_send_fd(sock, fd);
    close(fd);
    char c;
    REQUIRE(t_read_all(sock, &c, 1) && c == 'w', "A: B did not write");
    CHECK(cuMemcpyDtoH(host, va, bytes));
    size_t bad = t_pattern_mismatch(host, bytes, SEED_B);
    REQUIRE(bad == SIZE_MAX, "A: B's bytes, byte %zu differs", bad);
    t_ok("A: B's bytes through A's mapping");
    t_write_all(sock, "r", 1);
    int status = 0;
    REQUIRE(waitpid(b, &status, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "B failed (status %d)", status);
    unmap(va, bytes);
    CHECK(cuMemRelease(h));
    free(host);
    t_pass();
}

int main(void)
{
    t_init("vmm_ipc", 120);
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        close(sv[0]);
        importer(sv[1]);
    }
    close(sv[1]);
    exporter(sv[0], b);
}
