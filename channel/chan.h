/* The shared segment of one client: layout, request ring, reply lanes, staging slots.
 * Both ends compute the layout from the constants of proto.h, never from the segment. */
#ifndef MPSSHIM_CHAN_H
#define MPSSHIM_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "channel/proto.h"
#include "channel/wait.h"

struct chan {
    struct chan_shm *shm;
    size_t size;
    uint8_t *ring;
    struct chan_lane *lanes;
    uint8_t *staging;
    struct chan_devinfo *devinfo;
    struct chan_callbacks *callbacks;
    /* Private to the end that owns the role: the producer's tail, the consumer's head. */
    uint64_t pos;
    /* Producer only: records published unrung while the consumer slept, and when the first
     * of them was (chan_shm.coalesce_us). */
    uint32_t unrung;
    uint64_t unrung_since;
};

/* Size of a segment. */
size_t chan_segment_size(void);

/* Points `c` into a mapped segment of chan_segment_size() bytes at `base`. */
void chan_attach(struct chan *c, void *base);

/* Server: writes the static header of a fresh (zeroed) segment. */
void chan_init_header(struct chan *c);

/* Client: 0 if the header matches what this build expects, else -1 and a message. */
int chan_check_header(const struct chan *c, char *msg, size_t msglen);

/* Address of staging slot i. */
static inline uint8_t *chan_slot_data(const struct chan *c, uint32_t i)
{
    return c->staging + (size_t)i * CHAN_SLOT_SIZE;
}

/* ---- producer (client; callers serialise with their own lock) ---- */

/* Reserves one record of `size` bytes (header included; rounded up to 8), waiting for
 * ring space as needed. NULL when w->alive gave up. */
struct chan_rec *chan_ring_reserve(struct chan *c, uint32_t size, const struct chan_wait *w);

/* Publishes the reserved record to the server and rings its doorbell if it sleeps, unless
 * the server's chan_shm.coalesce_us lets the record wait (a launch or a generic call that
 * asks for no reply). */
void chan_ring_publish(struct chan *c, const struct chan_rec *r);

/* ---- consumer (server) ---- */

enum chan_next {
    CHAN_NEXT_NONE = 0, /* ring empty */
    CHAN_NEXT_REC = 1,  /* a record was copied to the caller's buffer */
    CHAN_NEXT_BAD = -1, /* the client broke the protocol */
};

/* Copies the next record into buf (CHAN_REC_MAX bytes) and consumes it. */
enum chan_next chan_ring_next(struct chan *c, void *buf);

/* Sleeps until the client rings the doorbell or `timeout_ns` passes (returns at once if
 * records arrived). */
void chan_ring_sleep(struct chan *c, uint64_t timeout_ns);

/* True when records are waiting. */
int chan_ring_pending(const struct chan *c);

/* Client: wakes a sleeping worker with no record for it (it then polls its waits). */
void chan_ring_nudge(struct chan *c);

/* ---- lanes ---- */

/* Server: posts `result` and `len` bytes already written to lane->data. */
void chan_lane_post(struct chan *c, uint32_t lane, CUresult result, uint32_t len);
/* The same, storing `seq` (the server's own count of the lane's replies) rather than adding
 * one to the lane's: a server that also has the GPU post replies (proto.h) keeps the count. */
void chan_lane_post_at(struct chan *c, uint32_t lane, CUresult result, uint32_t len, uint32_t seq);

/* Client: waits for the reply to the request sent when the lane's seq was `seq0`. */
int chan_lane_wait(struct chan *c, uint32_t lane, uint32_t seq0, const struct chan_wait *w);

#endif
