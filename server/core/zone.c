/* Address zones: where a server places what it gives addresses to, so that no two servers of
 * one pipe directory give the same address to different memory.
 *
 * Why: a process may come to hold addresses of several of them (the servers of each GPU it
 * uses, issue 30), and each address must say which memory it is. Left to the driver they
 * coincide: on an H200 (driver 580.159.04, 2026-11-30) every process's first
 * cuMemAddressReserve without a hint got 0x302000000, so two servers' arenas began at the
 * same address, and so did their clients' reservations; the servers' windows (window.c), at
 * one fixed hint, placed two clients' pinned allocations at 0x600001800000 alike. What the
 * driver places itself (its own cuMemAlloc, module globals, memory pools) lies where address
 * space randomisation puts it, different in each process.
 *
 * So each GPU's server (MPSSHIM_SERVER_PER_GPU's folders gpu-VALUE) claims a zone number of
 * the pipe directory: an exclusive lock on the file .zone-N there, held for the process's
 * life (the kernel drops it when the process ends, so a dead server's number is free again at
 * once, and a faulted server that lingers keeps its own). Zone N has device addresses
 * [DEV_BASE + (N-1) DEV_SPAN, + DEV_SPAN) and its window at WIN_BASE + (N-1) SRV_WINDOW_SIZE.
 * The pipe directory's own server is zone 0: the driver's choices and the window's usual
 * hint, as before. Those spans lie in addresses nothing else takes on x86-64 Linux: the
 * driver's own reservations were at 0x200000000-0x9020000000 and 0x600000000000-
 * 0x610000000000 on that machine, programs and their heaps near 0x550000000000, shared
 * libraries and mmap below 0x800000000000.
 *
 * Reservations in the zone are made with a hint that walks through it. The driver takes it
 * for large ones (from 32 MiB on, measured: it may move it up to the next free place) and
 * not for small ones (2 and 4 MiB, the arena's slabs: placed among the process's own
 * mappings, as its cuMemAlloc's are, where randomisation moves them per process). So a
 * reservation the driver placed at or above the lowest address the process's own mappings
 * could have (`own_floor`) is kept; one placed elsewhere (its fixed low region) is given back
 * and tried further on, and after TRIES misses the driver's own choice is taken and logged
 * once: an address two servers may then share. */
#define _GNU_SOURCE
#include "server/core/zone.h"
#include "server/core/server.h"
#include "server/core/window.h"
#include "server/control/siblings.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <unistd.h>

#define DEV_BASE 0x100000000000ull /* 16 TiB */
#define DEV_SPAN (2ull << 40)      /* 2 TiB a zone: zones 1-16 end at 48 TiB */
#define WIN_BASE 0x400000000000ull /* 64 TiB: windows of zones 1-16 end at 80 TiB */
#define TRIES 8

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int zone;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t cursor; /* the next hint (zone >= 1), under lock */
/* Below the process's own mappings (those the kernel places top-down, randomised per
 * process) by more than they could take: an address above it is one of those. */
static uint64_t own_floor = UINT64_MAX;
#define OWN_SPAN (16ull << 40)

/* The start of the zone's device addresses (zone >= 1). */
static uint64_t dev_lo(void)
{
    return DEV_BASE + (uint64_t)(zone - 1) * DEV_SPAN;
}

static void claim(void)
{
    char top[PATH_MAX], path[PATH_MAX + 16];
    if (!srv_siblings_top(top, sizeof(top))) return; /* the pipe directory's own: zone 0 */
    for (int n = 1; n <= SRV_ZONES; n++) {
        if ((size_t)snprintf(path, sizeof(path), "%s/.zone-%d", top, n) >= sizeof(path)) break;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            zone = n; /* fd stays open: the lock is this process's until it ends */
            cursor = dev_lo();
            void *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) {
                uint64_t at = (uint64_t)(uintptr_t)p;
                own_floor = at > OWN_SPAN ? at - OWN_SPAN : 0;
                munmap(p, 4096);
            }
            if (own_floor < WIN_BASE + SRV_ZONES * SRV_WINDOW_SIZE)
                own_floor = UINT64_MAX; /* mappings low in the address space: keep none */
            srv_log("Address zone %d of the pipe directory's servers: device addresses from "
                    "%#llx, host window at %#llx",
                    n, (unsigned long long)dev_lo(),
                    (unsigned long long)(WIN_BASE + (uint64_t)(n - 1) * SRV_WINDOW_SIZE));
            return;
        }
        close(fd);
    }
    srv_log("No address zone of %d was free in %s: this GPU's server shares zone 0's "
            "addresses, which a process using several GPUs' servers may then find twice",
            SRV_ZONES, top);
}

int srv_zone_no(void)
{
    pthread_once(&once, claim);
    return zone;
}

uint64_t srv_zone_window_hint(uint64_t usual)
{
    int n = srv_zone_no();
    return n ? WIN_BASE + (uint64_t)(n - 1) * SRV_WINDOW_SIZE : usual;
}

/* Up to a multiple of align, at least of SRV_WINDOW_ALIGN (the driver's granularity of
 * reservations, whose sizes are its multiples). */
static uint64_t round_up(uint64_t v, uint64_t align)
{
    if (align < SRV_WINDOW_ALIGN) align = SRV_WINDOW_ALIGN;
    return (v + align - 1) / align * align;
}

/* The next hint for `bytes` at `align`, moving the cursor past it; wraps to the zone's start
 * (where what was given back is free again); 0 when it cannot fit. */
static uint64_t next_hint(uint64_t bytes, uint64_t align)
{
    uint64_t lo = dev_lo(), hi = lo + DEV_SPAN;
    if (bytes > DEV_SPAN) return 0;
    pthread_mutex_lock(&lock);
    uint64_t at = round_up(cursor, align);
    if (at < cursor || at > hi - bytes) at = round_up(lo, align);
    if (at > hi - bytes)
        at = 0;
    else
        cursor = at + bytes;
    pthread_mutex_unlock(&lock);
    return at;
}

CUresult srv_zone_reserve(CUdeviceptr *va, uint64_t bytes, uint64_t align)
{
    if (!srv_zone_no()) return DRV(cuMemAddressReserve)(va, bytes, align, 0, 0);
    uint64_t lo = dev_lo(), hi = lo + DEV_SPAN;
    for (int i = 0; i < TRIES; i++) {
        uint64_t hint = next_hint(bytes, align);
        if (!hint) break;
        CUdeviceptr got = 0;
        CUresult r = DRV(cuMemAddressReserve)(&got, bytes, align, hint, 0);
        if (r != CUDA_SUCCESS) return r;
        if ((got >= lo && got <= hi - bytes) || got >= own_floor) {
            *va = got;
            return CUDA_SUCCESS;
        }
        DRV(cuMemAddressFree)(got, bytes);
    }
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        srv_log("A reservation of %llu bytes found no room in address zone %d: the driver "
                "placed it (said once)",
                (unsigned long long)bytes, zone);
    return DRV(cuMemAddressReserve)(va, bytes, align, 0, 0);
}
