/* The server's address window: one reservation of address space far from where processes'
 * own mappings land, inside which the server maps everything whose address it chooses
 * (clients' segments, pinned allocations, the pinned blocks of small copies).
 *
 * Why everything, not only pinned allocations: a client's cuMemHostRegister maps the
 * client's pages in the server at the client's own address (one pointer, one meaning under
 * unified addressing). A mapping the server made where the kernel likes (mmap(NULL)) can sit
 * on those addresses, and the client's call then fails for a reason that depends on other
 * clients (seen in CI: another client's segment, made a moment before, at the addresses a
 * third client registered). Processes' own mappings grow down from below their stacks; the
 * window's fixed hint is tens of TiB below that, so what the server maps here never takes
 * an address a client's own memory has. The driver's own reservations in the server are
 * outside our hands and outside the window.
 *
 * Pieces are taken first-fit from a list of free extents, guarded by window_lock (workers
 * and the main loop map concurrently). Given back, a piece becomes PROT_NONE reservation
 * again (mmap over it, so no other thread's mmap can land there in between) and merges
 * with a neighbour. Shared pieces (srv_window_share: pinned and managed memory's host pages)
 * are memfds mapped here and registered with the driver. */
#define _GNU_SOURCE
#include "server/core/window.h"
#include "server/core/driver.h"
#include "server/core/zone.h"
#include "server/memory/quietctx.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define WINDOW_HINT 0x600000000000ull /* a GPU's server's is its zone's (zone.c) */

static pthread_mutex_t window_lock = PTHREAD_MUTEX_INITIALIZER;
struct extent {
    uint64_t start, end;
};
static struct extent *free_ext;
static size_t nfree_ext;

int srv_window_init(void)
{
    void *p = mmap((void *)(uintptr_t)srv_zone_window_hint(WINDOW_HINT), SRV_WINDOW_SIZE, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    free_ext = malloc(sizeof(*free_ext));
    if (!free_ext) return -1;
    uint64_t base = (uint64_t)(uintptr_t)p;
    free_ext[0].start = (base + SRV_WINDOW_ALIGN - 1) & ~(SRV_WINDOW_ALIGN - 1);
    free_ext[0].end = base + SRV_WINDOW_SIZE;
    nfree_ext = 1;
    return 0;
}

/* Carves [s, s + size) out of free extent i (s inside it): the extent shrinks from either
 * end, or splits in two. 0 when the split cannot grow the list. */
static int carve(size_t i, uint64_t s, uint64_t size)
{
    struct extent *e = &free_ext[i];
    if (s == e->start) {
        e->start += size;
        return 1;
    }
    if (s + size == e->end) {
        e->end = s;
        return 1;
    }
    struct extent *n = realloc(free_ext, (nfree_ext + 1) * sizeof(*n));
    if (!n) return 0;
    free_ext = n;
    free_ext[nfree_ext].start = s + size;
    free_ext[nfree_ext].end = free_ext[i].end;
    nfree_ext++;
    free_ext[i].end = s;
    return 1;
}

uint64_t srv_window_take(uint64_t size, uint64_t avoid)
{
    uint64_t got = 0;
    size = (size + SRV_WINDOW_ALIGN - 1) & ~(SRV_WINDOW_ALIGN - 1);
    if (!size || size > SRV_WINDOW_SIZE) return 0;
    pthread_mutex_lock(&window_lock);
    for (size_t i = 0; i < nfree_ext && !got; i++) {
        uint64_t s = free_ext[i].start;
        /* Skip past an address the client could not map. */
        if (avoid >= s && avoid < free_ext[i].end)
            s = (avoid + size + SRV_WINDOW_ALIGN) & ~(SRV_WINDOW_ALIGN - 1);
        if (s >= free_ext[i].start && s + size <= free_ext[i].end && carve(i, s, size)) got = s;
    }
    pthread_mutex_unlock(&window_lock);
    return got;
}

void srv_window_give(uint64_t start, uint64_t size)
{
    size = (size + SRV_WINDOW_ALIGN - 1) & ~(SRV_WINDOW_ALIGN - 1);
    mmap((void *)(uintptr_t)start, size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    pthread_mutex_lock(&window_lock);
    for (size_t i = 0; i < nfree_ext; i++) {
        if (free_ext[i].end == start) {
            free_ext[i].end += size;
            pthread_mutex_unlock(&window_lock);
            return;
        }
        if (free_ext[i].start == start + size) {
            free_ext[i].start = start;
            pthread_mutex_unlock(&window_lock);
            return;
        }
    }
    struct extent *n = realloc(free_ext, (nfree_ext + 1) * sizeof(*n));
    if (n) {
        free_ext = n;
        free_ext[nfree_ext].start = start;
        free_ext[nfree_ext].end = start + size;
        nfree_ext++;
    }
    pthread_mutex_unlock(&window_lock);
}

void *srv_window_map(uint64_t size, int fd)
{
    uint64_t a = srv_window_take(size, 0);
    if (!a) return NULL;
    int flags = MAP_FIXED | (fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS);
    void *p = mmap((void *)(uintptr_t)a, size, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (p == MAP_FAILED) {
        srv_window_give(a, size);
        return NULL;
    }
    return p;
}

int srv_window_share(uint64_t size, uint64_t avoid, uint64_t *addr)
{
    int fd = -1;
    if (!(*addr = srv_window_take(size, avoid))) return -1;
    fd = memfd_create("mpsshim-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0 &&
        mmap((void *)(uintptr_t)*addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
             0) != MAP_FAILED &&
        srv_host_register((void *)(uintptr_t)*addr, size,
                          CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
            CUDA_SUCCESS)
        return fd;
    if (fd >= 0) close(fd);
    srv_window_give(*addr, size);
    *addr = 0;
    return -1;
}
