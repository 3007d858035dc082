/* Pinned host memory (a sealed memfd the server maps at one address in both processes and
 * registers with the driver, so that the GPU copies straight from/to the client's pages, as
 * fast as from cuMemHostAlloc's memory: bench/NOTES.md, "Host memory kinds"), and pointer
 * queries answered from the client's own ranges. Device memory is described in
 * cuda_symbols.txt (its ranges enter the mirror from the description). */
#define _GNU_SOURCE
#include "interpose/shim.h"
#include "channel/fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

CUresult SHIM_IMPL(cuMemGetAddressRange_v2)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct shim_range rg;
    if (shim_range_find(dptr, 1, &rg) != 0 || rg.kind == SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = rg.base;
    if (psize) *psize = rg.size;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pinned host memory */

/* Pinned and managed memory die with the context they were made in, as with the real
 * driver: each range of a destroyed context (context.c). */
static void unmap_pinned(const struct shim_range *r)
{
    /* Migrating managed memory is unmapped by migrate.c, block by block. */
    int gone = r->kind == SHIM_HT_MEM_MANAGED && shim_managed_forget(r->base);
    if (shim_range_is_host(r->kind) && !gone) munmap((void *)(uintptr_t)r->base, r->mapped);
    shim_mvar_range_gone(r); /* a __managed__ variable's host copy */
}

/* As the library loads, before any context exists. */
__attribute__((constructor)) static void hear_context_ranges(void)
{
    shim_ctx_on_range_gone(unmap_pinned);
}

/* Host allocations receive their fd on the socket in reply order: one at a time. */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static int registered(uint64_t base);

/* A migrating managed allocation (CHAN_HOST_MIGRATE, migrate.c), under host_lock: the reply
 * names its address and bytes, its block's address, and the block's bytes when the block is
 * new (its fd came first, to be mapped here at the block's address). */
static CUresult migrating_alloc(void **pp, const struct chan_host_alloc *m)
{
    uint64_t rep[4];
    uint32_t n = 0;
    CUresult r = shim_rpc(CHAN_OP_HOST_ALLOC, m, sizeof(*m), rep, sizeof(rep), &n);
    if (r != CUDA_SUCCESS) return r;
    int fd = n == sizeof(rep) && rep[3] ? shim_recv_fd() : -1;
    if (n != sizeof(rep) || (rep[3] && fd < 0)) return shim_dead_error();
    int placed = shim_mig_place(rep[0], m->bytes, rep[2], rep[3], fd, shim_current_ctx_id());
    if (fd >= 0) close(fd);
    if (placed != 0) {
        static int said;
        if (!said++)
            shim_log("managed memory at %#llx: %s; it is made in host memory instead (said once)",
                     (unsigned long long)rep[0],
                     placed > 0 ? "the address is taken in this process"
                                : "no room to track its pages");
        shim_rpc(CHAN_OP_HOST_FREE, &rep[0], sizeof(rep[0]), NULL, 0, NULL);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct shim_range rg = {.base = rep[0],
                            .size = m->bytes,
                            .kind = SHIM_HT_MEM_MANAGED,
                            .ctx = shim_route_ctx(),
                            .flags = m->flags & ~(CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE),
                            .mapped = rep[1]};
    shim_range_add(&rg);
    *pp = (void *)(uintptr_t)rep[0];
    return CUDA_SUCCESS;
}

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags, int quiet)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!(flags & CHAN_HOST_MANAGED) &&
        (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!quiet && (r = shim_capture_unsafe()) != CUDA_SUCCESS) return r;
    struct chan_host_alloc m = {.bytes = bytesize, .flags = flags};
    /* Managed memory's pushes and faults go through the thread's connection, which in a
     * process of one connection per device (route.c) may be another than its server's. */
    if ((flags & CHAN_HOST_MANAGED) && atomic_load(&shim_conns_extra))
        return shim_refuse("managed memory in a process served by several GPUs' own servers "
                           "(MPSSHIM_SERVER_PER_GPU=0 serves it, one server for every GPU)");
    /* Its descriptor comes on the socket of the connection the request goes to. */
    const struct shim_conn *cn = shim_route_conn();
    pthread_mutex_lock(&host_lock);
    if (flags & CHAN_HOST_MIGRATE) {
        r = migrating_alloc(pp, &m);
        pthread_mutex_unlock(&host_lock);
        return r;
    }
    /* The server picks an address free in its own address space; if it is taken in ours,
     * it picks another. */
    for (m.attempt = 0; m.attempt < 8; m.attempt++) {
        uint64_t rep[2];
        uint32_t n = 0;
        r = shim_rpc(CHAN_OP_HOST_ALLOC, &m, sizeof(m), rep, sizeof(rep), &n);
        if (r != CUDA_SUCCESS) break;
        int fd = shim_recv_fd_from(cn);
        if (fd < 0 || n != sizeof(rep)) {
            r = shim_dead_error();
            break;
        }
        void *want = (void *)(uintptr_t)rep[0];
        void *p =
            mmap(want, rep[1], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        close(fd);
        if (p == want) {
            int managed = (flags & CHAN_HOST_MANAGED) != 0;
            struct shim_range rg = {.base = rep[0],
                                    .size = bytesize,
                                    .kind = managed ? SHIM_HT_MEM_MANAGED : SHIM_HT_MEM_PINNED,
                                    .ctx = shim_route_ctx(),
                                    .flags = flags & ~CHAN_HOST_MANAGED,
                                    .mapped = rep[1]};
            shim_range_add(&rg);
            *pp = p;
            break;
        }
        if (p != MAP_FAILED) munmap(p, rep[1]); /* an old kernel ignored the hint */
        uint64_t a = rep[0];
        shim_rpc(CHAN_OP_HOST_FREE, &a, sizeof(a), NULL, 0, NULL);
        m.avoid = rep[0];
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&host_lock);
    return r;
}

CUresult shim_host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    return host_alloc(pp, bytesize, flags, 0);
}

CUresult shim_host_alloc_quiet(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, CU_MEMHOSTALLOC_PORTABLE, 1);
}

CUresult SHIM_IMPL(cuMemHostAlloc)(void **pp, size_t bytesize, unsigned int Flags)
{
    return shim_host_alloc(pp, bytesize, Flags);
}

CUresult SHIM_IMPL(cuMemAllocHost_v2)(void **pp, size_t bytesize)
{
    return shim_host_alloc(pp, bytesize, 0);
}

static CUresult host_free(void *p, int quiet)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    struct shim_range rg;
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (!p || shim_range_find(a, 1, &rg) != 0 || rg.base != a || rg.kind != SHIM_HT_MEM_PINNED ||
        registered(a))
        return CUDA_ERROR_INVALID_VALUE;
    if (!quiet && (r = shim_capture_unsafe()) != CUDA_SUCCESS) return r;
    /* Freeing pinned memory waits for every stream, of every context. */
    if (!quiet) shim_hostfn_settle(SHIM_SETTLE_ALL);
    /* Out of the mirror before the server frees it (as in shim_forward): another thread
     * may be given the address as soon as it is free. */
    shim_range_remove(a, NULL);
    struct shim_route saved;
    int routed = shim_route_to_ctx(rg.ctx, &saved); /* to the server that made it */
    r = shim_rpc(CHAN_OP_HOST_FREE, &a, sizeof(a), NULL, 0, NULL);
    if (routed) shim_route_end(&saved);
    if (r == CUDA_SUCCESS)
        munmap(p, rg.mapped);
    else
        shim_range_add(&rg);
    return r;
}

CUresult SHIM_IMPL(cuMemFreeHost)(void *p)
{
    return host_free(p, 0);
}

CUresult shim_host_free_quiet(void *p)
{
    return host_free(p, 1);
}

/* ---------------------------------------------------------------- registered host memory */

/* cuMemHostRegister: the server cannot see this process's pages, so they move into shared
 * memory first: a memfd the server maps at the same addresses and registers (see
 * server/memory/memory.c, host_register); once it has, the current contents go into the memfd and
 * the memfd replaces the pages here (MAP_FIXED), so that one address names the same bytes
 * in the program, in the server and on the GPU. From then on the range is pinned memory
 * like cuMemHostAlloc's. Limits (README): whole pages move, so other data sharing those
 * pages becomes shared memory too (a fork() shares them instead of copying); writes other
 * threads make to the range during the move may be lost; only private anonymous memory
 * (heap, anonymous mappings, stacks) can move. After cuMemHostUnregister the pages move back
 * to private memory, with their contents. A shared mapping of shared memory (/dev/shm, a
 * memfd: NCCL's shared-memory transport) needs no move: the server maps the same file at the
 * same address (register_shared). Other file mappings are refused. */
struct registration {
    uint64_t user;      /* the pointer the program registered */
    uint64_t base, len; /* the pages that moved */
    int fd;             /* the memfd now under them; -1: a shared mapping, which stayed */
};
static struct registration *regs; /* guarded by host_lock */
static size_t nregs, capregs;

/* Room for one more registration; host_lock held. 0, or -1 when out of memory. */
static int regs_room(void)
{
    if (nregs < capregs) return 0;
    struct registration *n = realloc(regs, (capregs * 2 + 8) * sizeof(*n));
    if (!n) return -1;
    regs = n;
    capregs = capregs * 2 + 8;
    return 0;
}

/* 1 if [base, base + len) lies in private anonymous mappings of this process, read-write. */
static int movable(uint64_t base, uint64_t len)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0;
    char line[512];
    uint64_t covered = base, end = base + len;
    while (covered < end && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi, inode;
        char perms[5], path[256] = "";
        if (sscanf(line, "%llx-%llx %4s %*s %*s %llu %255s", &lo, &hi, perms, &inode, path) < 4)
            continue;
        if (hi <= covered || lo >= end) continue;
        if (lo > covered || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || inode ||
            (path[0] && strcmp(path, "[heap]") != 0 && strncmp(path, "[stack", 6) != 0 &&
             strncmp(path, "[anon", 5) != 0))
            break;
        covered = hi;
    }
    fclose(f);
    return covered >= end;
}

/* A shared file mapping of tmpfs (/dev/shm, a memfd) covering [base, base + len) in one
 * mapping, read-write: its file (opened through /proc/self/map_files) and the offset of
 * base in it, which the server maps too (its pages are already shared: nothing moves). 0, or
 * -1. The server decides whether it may map the file (server/memory/memory.c). */
static int shared_file(uint64_t base, uint64_t len, int *fd, uint64_t *offset)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return -1;
    char line[512];
    int rc = -1;
    while (rc != 0 && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi, off, inode;
        char perms[5];
        if (sscanf(line, "%llx-%llx %4s %llx %*s %llu", &lo, &hi, perms, &off, &inode) < 5 ||
            lo > base || hi < base + len)
            continue;
        if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's' || !inode) break;
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/map_files/%llx-%llx", lo, hi);
        if ((*fd = open(path, O_RDWR | O_CLOEXEC)) < 0) break;
        *offset = off + (base - lo);
        rc = 0;
    }
    fclose(f);
    return rc;
}

/* The descriptor on the socket first, then the record that uses it (the server takes it when
 * it replays the record). The socket is this process's: host_lock held, one at a time. */
static CUresult send_register(int fd, const struct chan_host_register *m)
{
    uint8_t one = 1;
    const struct shim_conn *cn = shim_route_conn();
    if (chan_send_fd(cn->sock, &one, 1, fd) != 0) return shim_conn_dead_error(cn);
    return shim_rpc(CHAN_OP_HOST_REGISTER, m, sizeof(*m), NULL, 0, NULL);
}

/* The pinned range of a registration that succeeded. */
static void add_range(uint64_t base, uint64_t len, unsigned flags)
{
    struct shim_range nr = {.base = base,
                            .size = len,
                            .kind = SHIM_HT_MEM_PINNED,
                            .ctx = shim_route_ctx(),
                            .flags = flags &
                                     (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
                            .mapped = len};
    shim_range_add(&nr);
}

/* A shared mapping's pages are already shared: the server maps the same file at the same
 * address (guarded there against a truncation: server/memory/shmguard.c) and registers it;
 * nothing moves here, nor back when it is unregistered. Takes fd. */
static CUresult register_shared(uint64_t user, uint64_t base, uint64_t len, unsigned flags, int fd,
                                uint64_t offset)
{
    CUresult r;
    pthread_mutex_lock(&host_lock);
    struct chan_host_register m = {
        .what = CHAN_HR_REGISTER, .flags = flags, .addr = base, .bytes = len, .offset = offset};
    if (regs_room() != 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if ((r = send_register(fd, &m)) == CUDA_SUCCESS) {
        add_range(base, len, flags);
        regs[nregs++] = (struct registration){.user = user, .base = base, .len = len, .fd = -1};
    }
    pthread_mutex_unlock(&host_lock);
    close(fd);
    return r;
}

static CUresult host_register(void *p, size_t bytesize, unsigned flags)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t user = (uint64_t)(uintptr_t)p, end;
    if (!p || !bytesize || __builtin_add_overflow(user, bytesize, &end) ||
        (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return shim_refuse_as("cuMemHostRegister of I/O memory (CU_MEMHOSTREGISTER_IOMEMORY)",
                              CUDA_ERROR_NOT_SUPPORTED);
    uint64_t base = user & ~(page - 1), len = ((end + page - 1) & ~(page - 1)) - base;
    struct shim_range rg;
    for (uint64_t a = base; a < base + len; a += page)
        if (shim_range_find(a, 1, &rg) == 0) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if ((r = shim_capture_unsafe()) != CUDA_SUCCESS) return r;
    int sfd = -1;
    uint64_t offset = 0;
    if (!movable(base, len)) {
        if (shared_file(base, len, &sfd, &offset) != 0)
            return shim_refuse_as("cuMemHostRegister of memory that is neither private "
                                  "anonymous memory nor a shared mapping of shared memory "
                                  "(a file on disk, read-only memory)",
                                  CUDA_ERROR_NOT_SUPPORTED);
        return register_shared(user, base, len, flags, sfd, offset);
    }
    /* Sealed against resizing: the server maps it too and stores into it (it refuses a
     * memfd that could shrink under it, server/memory/memory.c). */
    int fd = memfd_create("mpsshim-registered", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        if (fd >= 0) close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&host_lock);
    if (regs_room() != 0) {
        pthread_mutex_unlock(&host_lock);
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct chan_host_register m = {
        .what = CHAN_HR_REGISTER, .flags = flags, .addr = base, .bytes = len};
    r = send_register(fd, &m);
    if (r == CUDA_SUCCESS) {
        /* The contents now, then the memfd in the pages' place: writes between the two
         * by other threads would be lost (the only window, microseconds). */
        void *got = MAP_FAILED;
        if (pwrite(fd, (void *)(uintptr_t)base, len, 0) == (ssize_t)len)
            got = mmap((void *)(uintptr_t)base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       fd, 0);
        if (got == MAP_FAILED) {
            struct chan_host_register u = {.what = CHAN_HR_UNREGISTER, .addr = base};
            shim_rpc(CHAN_OP_HOST_REGISTER, &u, sizeof(u), NULL, 0, NULL);
            r = CUDA_ERROR_OPERATING_SYSTEM;
        } else {
            add_range(base, len, flags);
            regs[nregs++] = (struct registration){.user = user, .base = base, .len = len, .fd = fd};
            fd = -1; /* kept: unregistering moves the pages back from it */
        }
    }
    pthread_mutex_unlock(&host_lock);
    if (fd >= 0) close(fd);
    return r;
}

CUresult SHIM_IMPL(cuMemHostRegister_v2)(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

CUresult SHIM_IMPL(cuMemHostUnregister)(void *p)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    shim_hostfn_settle(SHIM_SETTLE_ALL); /* unregistering waits for every stream (hostfn.c) */
    pthread_mutex_lock(&host_lock);
    size_t i = 0;
    while (i < nregs && regs[i].user != (uint64_t)(uintptr_t)p)
        i++;
    if (!p || i == nregs) {
        pthread_mutex_unlock(&host_lock);
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    struct chan_host_register m = {.what = CHAN_HR_UNREGISTER, .addr = regs[i].base};
    struct shim_range rg;
    struct shim_route saved; /* to the server it was registered with */
    int routed = shim_range_find(regs[i].base, 1, &rg) == 0 && shim_route_to_ctx(rg.ctx, &saved);
    r = shim_rpc(CHAN_OP_HOST_REGISTER, &m, sizeof(m), NULL, 0, NULL);
    if (routed) shim_route_end(&saved);
    if (r == CUDA_SUCCESS) {
        /* The pages go back to private anonymous memory, their contents read from the
         * memfd (the same window for other threads' writes as when they moved). */
        struct registration g = regs[i];
        void *at = (void *)(uintptr_t)g.base;
        if (g.fd >= 0 && mmap(at, g.len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == at) {
            for (uint64_t off = 0; off < g.len;) {
                ssize_t k = pread(g.fd, (char *)at + off, g.len - off, (off_t)off);
                if (k <= 0) break;
                off += (uint64_t)k;
            }
        }
        if (g.fd >= 0) close(g.fd); /* a shared mapping stays as it is */
        shim_range_remove(g.base, NULL);
        regs[i] = regs[--nregs];
    }
    pthread_mutex_unlock(&host_lock);
    return r;
}

/* 1 if the pinned range at base is registered memory (not cuMemHostAlloc's). */
static int registered(uint64_t base)
{
    pthread_mutex_lock(&host_lock);
    int found = 0;
    for (size_t i = 0; i < nregs && !found; i++)
        found = regs[i].base == base;
    pthread_mutex_unlock(&host_lock);
    return found;
}

CUresult SHIM_IMPL(cuMemHostGetDevicePointer_v2)(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct shim_range rg;
    if (!pdptr || Flags != 0 || shim_range_find((uint64_t)(uintptr_t)p, 1, &rg) != 0 ||
        rg.kind != SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    /* Unified addressing: the device sees pinned memory at its host address. */
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuMemHostGetFlags)(unsigned int *pFlags, void *p)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct shim_range rg;
    if (!pFlags || shim_range_find((uint64_t)(uintptr_t)p, 1, &rg) != 0 ||
        rg.kind != SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    *pFlags = rg.flags;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pointer attributes */

/* Writes one attribute of a known range; CUDA_ERROR_INVALID_VALUE for ones that do not
 * apply. `found` is 0 for memory the shim does not know (pageable host memory). */
static CUresult attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr, int found,
                          const struct shim_range *rg)
{
    int dev = -1;
    CUcontext ctx = NULL;
    if (found) {
        ctx = shim_ctx_by_id(rg->ctx);
        shim_ctx_lookup(ctx, NULL, &dev);
    }
    /* A __managed__ variable: managed, and the host dereferences its copy (mvars.c). */
    int mvar = found && rg->kind == SHIM_HT_MEM_GLOBAL && (rg->flags & SHIM_RANGE_MVAR);
    int managed = found && (rg->kind == SHIM_HT_MEM_MANAGED || mvar);
    int host = found && (shim_range_is_host(rg->kind) || mvar); /* the host can dereference it */
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(CUcontext *)data = ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        /* Managed memory reads as device memory, as the driver reports it on a discrete
         * GPU (cudart tells it apart by IS_MANAGED: cudaMemoryTypeManaged). */
        *(unsigned *)data = host && !managed ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        /* Unique among live allocations of this process: the base address. */
        *(unsigned long long *)data = rg->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = managed;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = dev;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = rg->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(size_t *)data = rg->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        *(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        if (!found) return CUDA_ERROR_INVALID_VALUE;
        /* The pool a range belongs to when its kind belongs to pools (the description
         * named the pool: cuMemAllocFromPoolAsync); NULL otherwise (cuMemAllocAsync's pool
         * is the server's choice). */
        *(CUmemoryPool *)data = NULL;
        for (int i = 0; i < shim_types[rg->kind].nparents; i++)
            if (shim_types[rg->kind].parents[i] == SHIM_HT_CUmemoryPool)
                *(CUmemoryPool *)data = (CUmemoryPool)(uintptr_t)rg->owner;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult SHIM_IMPL(cuPointerGetAttribute)(void *data, CUpointer_attribute attribute_,
                                          CUdeviceptr ptr)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    struct shim_range rg;
    int found = shim_range_find(ptr, 1, &rg) == 0;
    return attribute(data, attribute_, ptr, found, &rg);
}

CUresult SHIM_IMPL(cuPointerGetAttributes)(unsigned int numAttributes,
                                           CUpointer_attribute *attributes, void **data,
                                           CUdeviceptr ptr)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    struct shim_range rg;
    int found = shim_range_find(ptr, 1, &rg) == 0;
    /* Unlike the singular call, unknown pointers are not an error: the values read as
     * zero (memory type 0 = unregistered host memory). */
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i]) continue;
        if (attribute(data[i], attributes[i], ptr, found, &rg) != CUDA_SUCCESS) {
            switch (attributes[i]) {
            case CU_POINTER_ATTRIBUTE_CONTEXT:
            case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
                *(void **)data[i] = NULL;
                break;
            case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            case CU_POINTER_ATTRIBUTE_BUFFER_ID:
            case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
                *(unsigned long long *)data[i] = 0;
                break;
            case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                *(int *)data[i] = -2;
                break;
            default:
                *(unsigned *)data[i] = 0;
                break;
            }
        }
    }
    return CUDA_SUCCESS;
}
