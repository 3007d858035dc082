/* queue.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_QUEUE_H
#define MPSSHIM_SERVER_QUEUE_H

#include "server/core/server.h"

/* queue.c: back-pressure on queued work. Past MPSSHIM_QUEUE_LIMIT its requests wait; when
 * its work waits on itself they are taken again up to this many times the limit. */
#define SRV_QUEUE_HARD_FACTOR 4
/* Charges `bytes` the server holds for work just enqueued on s until the GPU passes it. */
void srv_queue_charge(struct srv_client *c, struct srv_stream *s, uint64_t bytes);
/* 1 when the worker should take none of the client's requests now (over its limit). */
int srv_queue_paused(struct srv_client *c);
/* s goes: its uncovered bytes get a mark first, or are forgotten when its context died. */
void srv_queue_stream_gone(struct srv_client *c, struct srv_stream *s, int dead);
/* dev's context died: marks there are forgotten and their bytes let go. */
void srv_queue_forget_device(struct srv_client *c, int dev);
/* The client leaves (its work drained or left running): its marks go. */
void srv_queue_release(struct srv_client *c);

#endif
