/* gpuword.c: words of server memory that a client's stream stores to once it has run the work
 * before, which the client's worker reads instead of asking the driver. */
#ifndef MPSSHIM_SERVER_GPUWORD_H
#define MPSSHIM_SERVER_GPUWORD_H

#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>

/* One wait's word (waits.c: struct srv_wait). */
struct srv_gpuword {
    _Atomic uint32_t *host; /* NULL: none */
    uint32_t target;        /* the value stored once the stream gets there */
};

/* Takes a word and enqueues on `s` the store of its next value behind everything enqueued
 * there so far: 0, or -1 (no word could be had, or the driver refused the store: w holds none).
 * The caller has made sure `s` is not capturing (the store would go into the graph). */
int srv_gpuword_store(struct srv_gpuword *w, CUstream s);
/* 1 once the stream has stored w's value. A load: no driver call. */
static inline int srv_gpuword_reached(const struct srv_gpuword *w)
{
    return w->host && atomic_load_explicit(w->host, memory_order_acquire) == w->target;
}
/* Lets go of w's word. One whose store may still be pending (not reached: its client left
 * first, or its stream faulted) is taken again only once the store has landed, so that no
 * later wait takes a store that was another's for its own. */
void srv_gpuword_release(struct srv_gpuword *w);

#endif
