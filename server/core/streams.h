/* The streams core (streams.c): a client's streams and contexts, and the walks over them. */
#ifndef MPSSHIM_SERVER_STREAMS_H
#define MPSSHIM_SERVER_STREAMS_H

#include "server/core/server.h"

/* Resolves the stream a client named (handles NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
 * and `ptds` per-thread semantics) in the current context. NULL if invalid. */
struct srv_stream *srv_stream_resolve(struct srv_client *c, uint64_t handle, int ptds,
                                      uint16_t thread);
/* Makes `s` ready to take one more operation, keeping CUDA's legacy-stream ordering
 * among this client's streams; returns the real stream to enqueue on. */
CUstream srv_stream_prepare(struct srv_client *c, struct srv_stream *s);
/* A context sync while streams of the client's capture in it fails and invalidates those
 * captures, as with the driver: the driver's error, or CUDA_SUCCESS when none captures. */
CUresult srv_captures_sync(struct srv_client *c, uint32_t ctx);
/* 1 while `s` captures work into a graph (only asked of the driver while the client has a
 * capture going): the server must then add no work of its own to it. */
int srv_stream_capturing(struct srv_client *c, struct srv_stream *s);
/* Destroys a stream's server objects (after synchronising it). */
void srv_stream_free(struct srv_client *c, struct srv_stream *s);
/* streams.c: context x's stream for __managed__ variables' copies, made on first use
 * (non-blocking, among the context's default streams for drains and releases); NULL when
 * it cannot be made. */
struct srv_stream *srv_stream_mvar(struct srv_client *c, struct srv_ctx *x);
/* The same for migrating memory's pulls that wait for all the client's work
 * (server/memory/migrate.c): apart from the copies' stream, which the host functions' own
 * pulls and pushes must find unblocked while such a pull waits for them. */
struct srv_stream *srv_stream_pulls(struct srv_client *c, struct srv_ctx *x);
/* Waits until every stream of the client (context `ctx`, 0 = all) is idle, capturing ones
 * left out (they run nothing): 0; -1 if the client left first (then nothing may be freed
 * under that work: its release sees to it). */
int srv_streams_drain(struct srv_client *c, uint32_t ctx);
/* The same, giving up at `by` (monotonic ns) instead: -1 if work was still running then. */
int srv_streams_drain_by(struct srv_client *c, uint32_t ctx, uint64_t by);
/* Waits for the server's stream st of client c: 0 once idle, -1 if c left first. */
int srv_stream_settle(struct srv_client *c, CUstream st);
/* The same with a bound (monotonic ns) instead of the client's presence: -1 if it came. */
int srv_stream_settle_by(struct srv_client *c, CUstream st, uint64_t by);
void srv_stream_forget(struct srv_client *c, struct srv_stream *s); /* streams.c */
/* streams.c: fn on every stream of the client in context ctx (0: any): created ones, the
 * per-thread default ones, the ones of __managed__ variables' copies, and the legacy ones
 * too when with_legacy. fn must free none. arg is passed to fn as is: most walks gather or
 * aim at something (a wait, a stream to order), which travels with the call rather than in
 * a thread's variable beside it. */
void srv_streams_each(struct srv_client *c, uint32_t ctx, int with_legacy,
                      void (*fn)(struct srv_client *c, struct srv_stream *s, void *arg), void *arg);
/* streams.c: says in the log each of the client's streams in context ctx (0: any) whose work
 * has not ended, with the kernel last launched there (the first few; the rest counted): what
 * a release that cannot wait any longer leaves running. By the thread serving c. */
void srv_streams_say_running(struct srv_client *c, uint32_t ctx);
/* streams.c: the streams context x holds itself go, each taken out of x and passed to gone
 * (srv_stream_free, or srv_stream_forget when they died with it): its per-thread default
 * ones, its legacy one, its __managed__ variables' one. Not srv_streams_each, whose fn may
 * free none and which passes the created streams too (they go with their objects). */
void srv_streams_drop(struct srv_client *c, struct srv_ctx *x,
                      void (*gone)(struct srv_client *c, struct srv_stream *s));

/* streams.c: the work just queued on m's real stream st (the stream of transfers of the
 * client's current context, srv_stream_mvar) comes before every later work of the client,
 * on any of its streams: its mark recorded, the client's count of such transfers bumped
 * (srv_stream_prepare makes each stream wait once). r is the queueing's result so far;
 * returns the final one. */
CUresult srv_stream_order_all(struct srv_client *c, struct srv_stream *m, CUstream st, CUresult r);

#endif
