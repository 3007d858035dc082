/* The clients' address space kept free in the server (MPSSHIM_KEEP_CLIENT_SPACE): at start,
 * before the driver is loaded or any thread made, the server reserves the few TiB below its
 * libraries, where every process's own mappings land, so that its own later mappings (the
 * driver, its reservations of device addresses, thread stacks, malloc's arenas) land below
 * them, far from any client's. A client's cuMemHostRegister, which the server maps at the
 * client's own address (one pointer, one meaning under unified addressing: memory.c), is
 * then mapped over that reservation.
 *
 * Why: a process's mappings grow down from a base the kernel randomises within 1 TiB below
 * its stack; the server's too. Where the two overlap, a client's registration finds the
 * server's own mapping at its address and is refused (CUDA_ERROR_NOT_SUPPORTED, logged):
 * seen in the GPU tier on an H200 (2026-11-29), twice in one run (rows shmreg --truncate and
 * waitvalue-twin; the log kept of the first names the driver's own libcuda.so), with address
 * randomisation on. Without it (setarch -R, or kernel's
 * randomize_va_space 0) every process's mappings start at the same place, and a client's
 * first registration lands on the server's: on the CPU test driver, shmreg's registration
 * of a file mapped before any CUDA call found a thread's anonymous mapping of the server
 * there. The same overlap lets a client's host address equal a device address it holds.
 * The window (window.c) keeps what the server places itself away from clients; this keeps
 * what the driver and libc place away from them.
 *
 * How: the reservation is [lo, hi): hi the top of the highest gap of RESERVE_PROBE bytes
 * below the server's libraries (where its next mapping would go), lo = hi - RESERVE_SPAN.
 * A registration inside it is mapped there with MAP_FIXED, after a check that no other
 * registration holds any of those addresses (`taken`, under space_lock: MAP_FIXED would
 * silently replace it); given back, it becomes reservation again in one mmap, so that no
 * other mapping of the server can take the hole meanwhile. A registration outside it is
 * mapped as before (MAP_FIXED_NOREPLACE); one across its edge is refused.
 *
 * On by default since the GPU tier passed with it on two H200s (2026-11-29, driver
 * 580.159.04: 151 rows, the driver's device-address reservations at 0x200000000-0x9020000000
 * and 0x600000000000-0x610000000000, below the range). Not taken where the address space is
 * limited (RLIMIT_AS: the reservation would count against it). */
#define _GNU_SOURCE
#include "server/core/clientspace.h"
#include "server/core/server.h"
#include "channel/ranges.h"
#include "channel/settings.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* 4 TiB: the 1 TiB over which bases are randomised, and 3 TiB of a client's own mappings
 * below its base. The address space has 128 TiB (47 bits); the window lies near 96 TiB. */
#define RESERVE_SPAN (4ull << 40)
/* Larger than any hole between the server's libraries at start. */
#define RESERVE_PROBE (1ull << 30)
#define RESERVE_ALIGN (2ull << 20)

static uint64_t lo, hi;     /* the reservation; both 0 when there is none */
static const char *why_not; /* no reservation, though asked: why (said once the log is open) */

/* Registrations inside the reservation: a range table (channel/ranges.h, which refuses an
 * overlapping range), under space_lock. */
static pthread_mutex_t space_lock = PTHREAD_MUTEX_INITIALIZER;
static struct chan_ranges taken = {.elem = sizeof(struct chan_range)};

void srv_clientspace_init(void)
{
    if (!chan_setting_num(CHAN_SET_KEEP_CLIENT_SPACE)) return;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        why_not = "the process's address space is limited (RLIMIT_AS)";
        return;
    }
    void *probe =
        mmap(NULL, RESERVE_PROBE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (probe == MAP_FAILED) {
        why_not = "no address space to probe";
        return;
    }
    uint64_t top = ((uint64_t)(uintptr_t)probe + RESERVE_PROBE) & ~(RESERVE_ALIGN - 1);
    munmap(probe, RESERVE_PROBE);
    if (top < RESERVE_SPAN + (RESERVE_SPAN << 1)) {
        why_not = "the address space is too small";
        return;
    }
    uint64_t start = top - RESERVE_SPAN;
    void *p = mmap((void *)(uintptr_t)start, RESERVE_SPAN, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != (void *)(uintptr_t)start) {
        if (p != MAP_FAILED) munmap(p, RESERVE_SPAN); /* an old kernel took it as a hint */
        why_not = "the range below the libraries is not free";
        return;
    }
    lo = start;
    hi = top;
}

void srv_clientspace_log(void)
{
    if (lo)
        srv_log("The clients' address space is kept free of the server's own mappings: "
                "%#llx-%#llx reserved (MPSSHIM_KEEP_CLIENT_SPACE)",
                (unsigned long long)lo, (unsigned long long)hi);
    else if (why_not)
        srv_log("MPSSHIM_KEEP_CLIENT_SPACE: no reservation, %s", why_not);
}

int srv_clientspace_map(uint64_t addr, uint64_t len, int prot, int fd, off_t off)
{
    uint64_t end = addr + len; /* the caller checked it does not wrap */
    void *want = (void *)(uintptr_t)addr;
    if (!lo || end <= lo || addr >= hi) {
        void *got = mmap(want, len, prot, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, off);
        if (got == want) return 0;
        int err = got == MAP_FAILED ? errno : EEXIST;
        if (got != MAP_FAILED) munmap(got, len); /* an old kernel took the address as a hint */
        return err;
    }
    if (addr < lo || end > hi) return EEXIST; /* across the edge: partly the server's */
    struct chan_range r = {.base = addr, .size = len};
    pthread_mutex_lock(&space_lock);
    int err = chan_ranges_add(&taken, &r) == 0 ? 0 : EEXIST; /* overlap (or no memory) */
    if (!err && mmap(want, len, prot, MAP_SHARED | MAP_FIXED, fd, off) != want) {
        err = errno;
        chan_ranges_remove(&taken, addr, NULL);
    }
    pthread_mutex_unlock(&space_lock);
    return err;
}

void srv_clientspace_unmap(uint64_t addr, uint64_t len)
{
    uint64_t end = addr + len;
    void *at = (void *)(uintptr_t)addr;
    if (!lo || end <= lo || addr >= hi) {
        munmap(at, len);
        return;
    }
    pthread_mutex_lock(&space_lock);
    /* Reservation again in one step: no other mapping of the server can land in between. */
    mmap(at, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    chan_ranges_remove(&taken, addr, NULL);
    pthread_mutex_unlock(&space_lock);
}
