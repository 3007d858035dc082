/* Replies that wait for the GPU (waits.c): a stream's, a context's or an event's work. */
#ifndef MPSSHIM_SERVER_WAITS_H
#define MPSSHIM_SERVER_WAITS_H

#include "server/core/server.h"
#include "server/memory/gpuword.h"

/* A reply that waits for the GPU: posted when all its events have completed. */
#define SRV_WAIT_EVENTS 64
/* Waits a client may have pending at once. One that keeps the protocol waits on at most one
 * reply a lane (CHAN_NLANES); a wait already answered (the GPU stored its reply, or a word
 * landed) lingers until its events are asked, which the worker does lazily, so that a client
 * of many threads each synchronising every few microseconds may hold two or three a lane for a
 * moment. A client that asks for replies without waiting for them (lanes reused, forged
 * records) on a stream that never finishes would otherwise grow the server's heap by a wait
 * (about 1 KiB) and an event per record, for as long as it stays. At the bound every wait's
 * events are asked (SRV_WAITS_ALL), which takes back those answered (their events are behind
 * what was waited for); past it still, a synchronisation is answered CUDA_ERROR_OUT_OF_MEMORY,
 * said in the log once per client. */
#define SRV_WAITS_MAX (4 * CHAN_NLANES)
struct srv_wait {
    struct srv_wait *next;
    int lane;
    uint32_t reply_len;
    CUresult result;
    int own; /* reply with its own result only (srv_wait_stream_own) */
    /* A reply the GPU posts (waits.c gpu_reply; 2: to a thread told to spin for it): the
     * lane's reply number it stores. When its event completes the worker only wakes the
     * thread if it sleeps; on a failure it posts the failure under the same number. */
    int gpu;
    uint32_t target;
    /* A reply the worker posts once the stream has stored this word (waits.c, word waits); its
     * events only tell a fault, and when the word may go back. */
    struct srv_gpuword word;
    int replied;      /* its reply is posted: nothing more is for its lane */
    int added;        /* pending in the client's waits (counted in nwaits) */
    uint64_t made_ns; /* when it was made (chan_now_ns) */
    /* A wait whose reply needs no ask (gpu, word): when its events are next asked in a full
     * look, and whether its lane has a newer wait (its thread went on: asked at the next poll,
     * once). srv_waits_poll says why. */
    uint64_t ask_ns;
    int passed;
    int nev;
    CUevent ev[SRV_WAIT_EVENTS];
    int pooled[SRV_WAIT_EVENTS]; /* 1: return the event to the pool when done */
    int dev[SRV_WAIT_EVENTS];    /* device of each event (events belong to one context) */
};
/* Replies on `lane` once everything now enqueued on `s` has completed. */
CUresult srv_wait_stream(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len);
/* The same, replying with the wait's own result only: an error deferred from the client's
 * async work stays for its next synchronisation (a transfer of the shim's own). */
CUresult srv_wait_stream_own(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len);
/* Replies on `lane` once every stream of context `ctx` is idle. */
CUresult srv_wait_ctx(struct srv_client *c, struct srv_ctx *x, int lane);
/* Replies on `lane` once the event completes. */
CUresult srv_wait_event(struct srv_client *c, CUevent ev, int lane);
/* 1 when the client's process has one thread now (waits.c): none other can send a request
 * while it waits. */
int srv_client_one_thread(struct srv_client *c);
/* Polls pending waits, posting the replies of finished ones. 0 if none remain, 2 if all
 * that remain are replies the GPU posts to threads that spin for them or replies posted, else
 * 1; SRV_WAITS_WORDS added while a word wait's store has yet to land, for its first 20 ms (its
 * worker then looks at every turn). The events of waits whose replies need no ask of the driver
 * (the GPU posts them, or a word tells) are asked at the first poll after a newer wait on the
 * same lane was made (its thread saw the reply and went on: the events behind it are most
 * often done), once; else only in a full look, once the wait is SRV_WAITS_LAZY_US old, then
 * again after as long as its age, up to SRV_WAITS_ASK_MAX_US (every SRV_WAITS_LAZY_US while
 * the lane's thread sleeps for it). Each ask is a driver call (a cuEventQuery, 0.5-1 us on
 * an H200) during which a request that arrives waits unseen: made right after a request was
 * replayed, its thread then waits for the GPU anyway; made in a full look, at any moment.
 * Such an ask is what tells a fault, and wakes a thread that tired of spinning for the GPU's
 * reply and sleeps: so much later at worst. `full` SRV_WAITS_ALL asks every wait's events
 * whatever its age (the bound's look, SRV_WAITS_MAX). */
#define SRV_WAITS_WORDS 4
#define SRV_WAITS_LAZY_US 20u
#define SRV_WAITS_ASK_MAX_US 1000u
#define SRV_WAITS_ALL 2
int srv_waits_poll(struct srv_client *c, int full);
/* Gives w back (taken off c->waits by the caller), its events already given back or dropped:
 * kept for the next wait (new_wait) or freed. */
void srv_wait_free(struct srv_client *c, struct srv_wait *w);
/* Frees the waits kept for reuse (a client's end, after its waits are freed). */
void srv_waits_spares_free(struct srv_client *c);
/* Ends wait w (taken off c->waits by the caller) with error err: the thread waiting on its
 * lane gets err, whether its reply was to come from the worker or from the GPU. */
void srv_wait_fail(struct srv_client *c, struct srv_wait *w, CUresult err);
/* MPSSHIM_GPU_REPLIES (1 by default): stream synchronisations answered by the GPU. */
void srv_waits_init(void);

#endif
