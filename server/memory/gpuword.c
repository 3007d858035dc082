/* Words the GPU stores for a worker to see (issue 29: launch + synchronise within 1 us of
 * native).
 *
 * A client's synchronisation is answered by the GPU itself where its segment is registered:
 * the stream stores the reply's number into the client's lane (server/core/waits.c,
 * gpu_reply). A segment is registered only in the quiet context (server/core/segment.c), which
 * is made when a client first needs it, in 0.6-0.7 s on an H200; until then (a short program
 * runs its whole life in that window, and a server started afresh when idle makes the quiet
 * context again), and for a context synchronisation (the GPU answers one whose work is on
 * one stream since, waits.c one_stream_ctx), the worker waited for the GPU itself: blocked in the
 * driver where the client's process had one thread (asked of /proc/PID/stat at each wait: 3 us),
 * else by polling an event (a cuEventQuery, 0.5-1 us, per look). On an H200 a launch +
 * cuStreamSynchronize round trip took 10.6-11.9 us that way, 8.7-10.2 once the quiet context was
 * made, 8.1-8.8 natively; the worker's handler of the synchronisation 5.7-6.6 us against the GPU's
 * reply's 1.3-2.0 us plus 2.6-3.0 us for the store to land (`make STAMPS=1`, bench/stamps.py). With
 * these words: 1.3-1.8 us plus 3.1-3.5 us to the reply seen (bench/results/issue29-2026-11-28,
 * "Where a round trip's time goes").
 *
 * So the stream stores into a word of the server's instead, and the worker reads the word at
 * each turn of its loop: a load, no driver call, no system call (waits.c, word waits). The
 * words are server memory, never mapped into a client: 64 to a page of anonymous memory, each
 * on a cache line of its own, the page registered (portable, device-mapped) in the context
 * current when it is made, and never unregistered: an unregistration in a shared context waits
 * for every client's work and holds their launches meanwhile (quietctx.c), and a page is 4 KiB.
 * A wait takes a word and gives it back once its store has landed; a word let go before (its
 * client gone mid-wait) is taken again only once its store has landed, so that no later wait
 * takes another's store for its own (srv_gpuword_release). The pages are as many as waits were
 * ever pending at once, and the image's end lets go of them. */
#include "server/memory/gpuword.h"
#include "server/core/server.h"
#include "server/core/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#define GPUWORD_PAGE 4096u
#define GPUWORD_LINE 64u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t **spare; /* words given back, or not yet taken, of pages made */
static size_t nspare, cap;
static size_t nwords; /* words of the pages made: `spare` has room for every one */
/* Words let go before their store landed (a client gone mid-wait: its stream's work still
 * runs), each with the value it waits for; back to `spare` once it is there. A fault's stores
 * never land, and its image serves no new client. Every word is in one of the two, or held. */
static struct srv_gpuword *pending;
static size_t npending, pcap;
static int failed; /* a page could not be made or registered: not tried again (logged once) */

/* A page of words, registered; its words onto `spare`. Under lock. */
static int grow(void)
{
    if (failed) return -1;
    /* Room for every word made, not only those spare now: all may come back at once. */
    if (nwords + GPUWORD_PAGE / GPUWORD_LINE > cap) {
        size_t ncap = cap ? cap * 2 : 256;
        while (ncap < nwords + GPUWORD_PAGE / GPUWORD_LINE)
            ncap *= 2;
        _Atomic uint32_t **n = realloc(spare, ncap * sizeof(*n));
        if (!n) return -1;
        spare = n;
        cap = ncap;
    }
    void *p = mmap(NULL, GPUWORD_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1; /* tried again at the next wait */
    CUresult r = DRV(cuMemHostRegister_v2)(
        p, GPUWORD_PAGE, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS) {
        munmap(p, GPUWORD_PAGE);
    } else {
        CUdeviceptr d = 0;
        r = DRV(cuMemHostGetDevicePointer_v2)(&d, p, 0);
        if (r == CUDA_SUCCESS && d == (CUdeviceptr)(uintptr_t)p) {
            for (unsigned i = 0; i < GPUWORD_PAGE / GPUWORD_LINE; i++)
                spare[nspare++] = (_Atomic uint32_t *)((char *)p + i * GPUWORD_LINE);
            nwords += GPUWORD_PAGE / GPUWORD_LINE;
            return 0;
        }
        /* Registered, but not at its own address (no unified addressing): kept, unused, so
         * that no unregistration is ever made. */
    }
    failed = 1;
    srv_log("No word for the GPU to store for workers (%s): they wait for the GPU as before",
            r == CUDA_SUCCESS ? "not mapped at its own address" : srv_errname(r));
    return -1;
}

/* Pending words whose store has landed back to `spare`. Under lock. */
static void reap_pending(void)
{
    for (size_t i = 0; i < npending;) {
        if (srv_gpuword_reached(&pending[i])) {
            spare[nspare++] = pending[i].host;
            pending[i] = pending[--npending];
        } else {
            i++;
        }
    }
}

int srv_gpuword_store(struct srv_gpuword *w, CUstream s)
{
    pthread_mutex_lock(&lock);
    if (!nspare && npending) reap_pending();
    _Atomic uint32_t *h = nspare || grow() == 0 ? spare[--nspare] : NULL;
    pthread_mutex_unlock(&lock);
    w->host = NULL;
    if (!h) return -1;
    /* Every store to it has landed (srv_gpuword_release): its value is the last one stored. */
    uint32_t target = atomic_load_explicit(h, memory_order_relaxed) + 1;
    /* Default flags: the store follows a system-scope fence behind the stream's work. */
    if (DRV(cuStreamWriteValue32_v2)(s, (CUdeviceptr)(uintptr_t)h, target, 0) != CUDA_SUCCESS) {
        pthread_mutex_lock(&lock);
        spare[nspare++] = h; /* nothing was enqueued */
        pthread_mutex_unlock(&lock);
        return -1;
    }
    w->host = h;
    w->target = target;
    return 0;
}

void srv_gpuword_release(struct srv_gpuword *w)
{
    if (!w->host) return;
    pthread_mutex_lock(&lock);
    if (srv_gpuword_reached(w)) {
        spare[nspare++] = w->host; /* room: `spare` holds every word made (grow) */
    } else {
        if (npending == pcap) {
            size_t ncap = pcap ? pcap * 2 : 64;
            struct srv_gpuword *n = realloc(pending, ncap * sizeof(*n));
            if (n) {
                pending = n;
                pcap = ncap;
            }
        }
        /* Without room, the word is never used again: 64 bytes until the image ends. */
        if (npending < pcap) pending[npending++] = *w;
    }
    pthread_mutex_unlock(&lock);
    w->host = NULL;
}
