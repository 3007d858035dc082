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
 * The zone's device addresses are one reservation of HEAP bytes, made at the first request
 * (cuMemAddressReserve at the zone's start: the driver honours the hint), and this server
 * hands out pieces of it itself: cuMemMap maps into any part of a reservation. Why not a
 * reservation of the driver's for each request at a hint that walks through the zone (the
 * first version): measured on an H200 (2026-11-30), the driver takes no hint for 2, 4 or 16
 * MiB unless aligned to 1 GiB (it places them among the process's own mappings, randomised
 * per process), and once the server had loaded PyTorch's libraries it took none for 64 MiB
 * either, at eight places a GiB apart in the zone: what the driver keeps for itself grows
 * where it likes. Reserved whole at once, the zone is the server's alone.
 *
 * Why everything in the zone: another GPU's server of a process that uses both must map this
 * one's memory at the very address this server gave it (peer access, copies between them:
 * server/memory/mirror.c), and can only reserve there what the driver honours: whole pieces
 * of CHUNK bytes at addresses aligned to it (srv_zone_reserve_foreign). So a request of at
 * most CHUNK bytes lies within one chunk (chunks carved in UNIT pieces: `small`), and a larger
 * one takes whole chunks of its own (`whole`). The second half of each zone's span is left
 * unreserved, where the driver may put what it places beside the heap without reaching the
 * next zone. */
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
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define DEV_BASE 0x100000000000ull /* 16 TiB */
#define DEV_SPAN (2ull << 40)      /* 2 TiB a zone: zones 1-16 end at 48 TiB */
#define WIN_BASE 0x400000000000ull /* 64 TiB: windows of zones 1-16 end at 80 TiB */
#define UNIT (2ull << 20)          /* the pieces of a chunk: the granularity of reservations */
#define CHUNK (1ull << 30)         /* what another server reserves of this one's zone at once */
#define CHUNK_UNITS (CHUNK / UNIT)
#define HEAP (1ull << 40) /* reserved of the zone's DEV_SPAN */
#define NCHUNKS (HEAP / CHUNK)

/* Under lock: the heap's chunks, each free, carved in pieces, or part of a request of its own
 * (the first chunk of it says how many). */
enum { FREE, SMALL, WHOLE, WHOLE_TAIL };
static struct chunk {
    uint8_t state;
    uint32_t nwhole;                 /* WHOLE: the request's chunks */
    uint64_t used[CHUNK_UNITS / 64]; /* SMALL: pieces in use */
} chunks[NCHUNKS];
static uint64_t heap;   /* its address: 0 until reserved */
static int heap_failed; /* the reservation was refused: the driver places (said once) */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int zone;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

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

/* lock held: the heap reserved (once), or 0 when it cannot be. */
static int heap_ready(void)
{
    if (heap || heap_failed) return heap != 0;
    CUdeviceptr got = 0;
    CUresult r = DRV(cuMemAddressReserve)(&got, HEAP, CHUNK, dev_lo(), 0);
    if (r == CUDA_SUCCESS && got == dev_lo()) {
        heap = got;
        return 1;
    }
    if (r == CUDA_SUCCESS) DRV(cuMemAddressFree)(got, HEAP);
    heap_failed = 1;
    srv_log("The address zone %d's %llu GiB could not be reserved at %#llx (%s): the driver "
            "places this server's memory, where another GPU's server cannot map it for a "
            "process using both",
            zone, (unsigned long long)(HEAP >> 30), (unsigned long long)dev_lo(),
            r == CUDA_SUCCESS ? "placed elsewhere" : srv_errname(r));
    return 0;
}

/* lock held: n pieces in use (or free) from piece i of chunk c. */
static void mark(struct chunk *c, uint64_t i, uint64_t n, int used)
{
    for (uint64_t k = i; k < i + n; k++)
        if (used)
            c->used[k / 64] |= 1ull << (k % 64);
        else
            c->used[k / 64] &= ~(1ull << (k % 64));
}

/* lock held: the first of n free pieces of c at a multiple of `step` pieces, or -1. */
static int64_t run_in(const struct chunk *c, uint64_t n, uint64_t step)
{
    for (uint64_t i = 0; i + n <= CHUNK_UNITS; i += step) {
        uint64_t k = 0;
        while (k < n && !(c->used[(i + k) / 64] & (1ull << ((i + k) % 64))))
            k++;
        if (k == n) return (int64_t)i;
        i += k / step * step; /* piece i + k is taken: no run starts before it */
    }
    return -1;
}

/* lock held: a piece of the heap (bytes a multiple of UNIT, align a power of two), or 0. */
static uint64_t carve(uint64_t bytes, uint64_t align)
{
    if (bytes <= CHUNK && align <= CHUNK) {
        uint64_t n = bytes / UNIT, step = align > UNIT ? align / UNIT : 1;
        for (int pass = 0; pass < 2; pass++) /* chunks carved already, then a free one */
            for (uint64_t i = 0; i < NCHUNKS; i++) {
                struct chunk *c = &chunks[i];
                if (c->state != (pass ? FREE : SMALL)) continue;
                int64_t at = run_in(c, n, step);
                if (at < 0) continue;
                c->state = SMALL;
                mark(c, (uint64_t)at, n, 1);
                return heap + i * CHUNK + (uint64_t)at * UNIT;
            }
        return 0;
    }
    uint64_t k = (bytes + CHUNK - 1) / CHUNK, step = align > CHUNK ? align / CHUNK : 1;
    for (uint64_t i = 0; i + k <= NCHUNKS; i += step) {
        uint64_t j = 0;
        while (j < k && chunks[i + j].state == FREE)
            j++;
        if (j < k) continue;
        for (j = 0; j < k; j++)
            chunks[i + j].state = j ? WHOLE_TAIL : WHOLE;
        chunks[i].nwhole = (uint32_t)k;
        return heap + i * CHUNK;
    }
    return 0;
}

/* lock held: [va, va + bytes) back to the heap; 0, or -1 when it is none of the heap's. */
static int uncarve(uint64_t va, uint64_t bytes)
{
    if (!heap || va < heap || va - heap >= HEAP || !bytes || bytes % UNIT || (va - heap) % UNIT)
        return -1;
    uint64_t i = (va - heap) / CHUNK, off = (va - heap) % CHUNK;
    struct chunk *c = &chunks[i];
    if (c->state == SMALL && bytes <= CHUNK - off) {
        mark(c, off / UNIT, bytes / UNIT, 0);
        for (uint64_t w = 0; w < CHUNK_UNITS / 64; w++)
            if (c->used[w]) return 0;
        c->state = FREE; /* all given back: free for any request */
        return 0;
    }
    if (c->state == WHOLE && !off && (bytes + CHUNK - 1) / CHUNK == c->nwhole) {
        for (uint64_t j = 0; j < c->nwhole; j++)
            chunks[i + j].state = FREE;
        c->nwhole = 0;
        return 0;
    }
    return -1;
}

CUresult srv_zone_free(CUdeviceptr va, uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    int mine = uncarve(va, bytes) == 0;
    pthread_mutex_unlock(&lock);
    return mine ? CUDA_SUCCESS : DRV(cuMemAddressFree)(va, bytes);
}

CUresult srv_zone_reserve(CUdeviceptr *va, uint64_t bytes, uint64_t align)
{
    if (!srv_zone_no()) return DRV(cuMemAddressReserve)(va, bytes, align, 0, 0);
    uint64_t at = 0;
    /* The driver's rules for what it reserves itself: sizes of whole pieces, alignments of
     * powers of two (0: its own). Anything else is the driver's to answer. */
    int ours = bytes && bytes % UNIT == 0 && !(align & (align - 1));
    pthread_mutex_lock(&lock);
    if (ours && heap_ready()) at = carve(bytes, align);
    pthread_mutex_unlock(&lock);
    if (at) {
        *va = at;
        return CUDA_SUCCESS;
    }
    static _Atomic int said;
    if (ours && !atomic_exchange(&said, 1))
        srv_log("A reservation of %llu bytes found no room in address zone %d: the driver "
                "placed it, where another GPU's server cannot map it for a process using both "
                "(said once)",
                (unsigned long long)bytes, zone);
    return DRV(cuMemAddressReserve)(va, bytes, align, 0, 0);
}

/* ---------------------------------------------------------------- another zone's addresses */

/* Regions of other servers' zones reserved here, for their memory mapped at its own address
 * (mirror.c), under lock: each a chunk of theirs or the chunks of one request of theirs,
 * counted by the mappings in it. */
#define MAX_FOREIGN 1024
static struct foreign {
    uint64_t base, bytes;
    unsigned refs;
} foreign[MAX_FOREIGN];
static int nforeign;

/* The region of another zone that [va, va + bytes) lies in, as its server carves its heap:
 * the chunk it lies in, or the whole chunks of a request of more than one. 0 with *base and
 * *len; -1 when it is no other zone's heap's (this one's, zone 0's, or out of any). */
static int region_of(uint64_t va, uint64_t bytes, uint64_t *base, uint64_t *len)
{
    if (va < DEV_BASE || !bytes) return -1;
    uint64_t z = (va - DEV_BASE) / DEV_SPAN + 1, zlo = DEV_BASE + (z - 1) * DEV_SPAN;
    if (z > SRV_ZONES || (int)z == srv_zone_no() || va - zlo >= HEAP || bytes > zlo + HEAP - va)
        return -1;
    *base = va & ~(CHUNK - 1);
    *len = (va + bytes - *base + CHUNK - 1) & ~(CHUNK - 1);
    return 0;
}

CUresult srv_zone_reserve_foreign(uint64_t va, uint64_t bytes)
{
    uint64_t base, len;
    if (region_of(va, bytes, &base, &len) != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < nforeign && foreign[i].base != base)
        i++;
    if (i < nforeign) {
        if (foreign[i].bytes != len)
            r = CUDA_ERROR_INVALID_VALUE; /* a region of theirs overlapping another: cannot be */
        else
            foreign[i].refs++;
    } else if (nforeign == MAX_FOREIGN) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        CUdeviceptr got = 0;
        r = DRV(cuMemAddressReserve)(&got, len, CHUNK, base, 0);
        if (r == CUDA_SUCCESS && got != base) {
            DRV(cuMemAddressFree)(got, len);
            r = CUDA_ERROR_ALREADY_MAPPED; /* taken here by something else */
        }
        if (r == CUDA_SUCCESS) foreign[nforeign++] = (struct foreign){base, len, 1};
    }
    pthread_mutex_unlock(&lock);
    return r;
}

void srv_zone_release_foreign(uint64_t va, uint64_t bytes)
{
    uint64_t base, len;
    if (region_of(va, bytes, &base, &len) != 0) return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nforeign; i++)
        if (foreign[i].base == base) {
            if (!--foreign[i].refs) {
                DRV(cuMemAddressFree)(base, len);
                foreign[i] = foreign[--nforeign];
            }
            break;
        }
    pthread_mutex_unlock(&lock);
}
