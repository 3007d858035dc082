/* Segment layout, request ring and reply lanes; see chan.h and proto.h. */
#include "channel/chan.h"
#include "channel/prof.h"

/* A producer facing a full ring spins this long before it sleeps. */
#define CHAN_SPACE_SPIN_NS (100ull * 1000)

#include <stdio.h>
#include <string.h>

#define PAGE 4096u
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

static size_t off_ring(void)
{
    return ALIGN_UP(sizeof(struct chan_shm), PAGE);
}
static size_t off_lanes(void)
{
    return off_ring() + CHAN_RING_SIZE;
}
static size_t off_devinfo(void)
{
    return off_lanes() + (size_t)CHAN_NLANES * CHAN_LANE_SIZE;
}
static size_t off_callbacks(void)
{
    return ALIGN_UP(off_devinfo() + sizeof(struct chan_devinfo), PAGE);
}
static size_t off_staging(void)
{
    return ALIGN_UP(off_callbacks() + sizeof(struct chan_callbacks), PAGE);
}

size_t chan_segment_size(void)
{
    return off_staging() + (size_t)CHAN_NSLOTS * CHAN_SLOT_SIZE;
}

void chan_attach(struct chan *c, void *base)
{
    uint8_t *b = base;
    c->shm = base;
    c->size = chan_segment_size();
    c->ring = b + off_ring();
    c->lanes = (struct chan_lane *)(b + off_lanes());
    c->devinfo = (struct chan_devinfo *)(b + off_devinfo());
    c->callbacks = (struct chan_callbacks *)(b + off_callbacks());
    c->staging = b + off_staging();
    c->pos = 0;
}

void chan_init_header(struct chan *c)
{
    struct chan_shm *s = c->shm;
    s->magic = CHAN_MAGIC;
    s->major = CHAN_PROTO_MAJOR;
    s->minor = CHAN_PROTO_MINOR;
    s->size = c->size;
    s->ring_off = off_ring();
    s->ring_size = CHAN_RING_SIZE;
    s->lanes_off = off_lanes();
    s->nlanes = CHAN_NLANES;
    s->lane_size = CHAN_LANE_SIZE;
    s->staging_off = off_staging();
    s->nslots = CHAN_NSLOTS;
    s->slot_size = CHAN_SLOT_SIZE;
    s->devinfo_off = off_devinfo();
}

int chan_check_header(const struct chan *c, char *msg, size_t msglen)
{
    const struct chan_shm *s = c->shm;
    if (s->magic != CHAN_MAGIC || s->major != CHAN_PROTO_MAJOR) {
        snprintf(msg, msglen, "shared segment protocol %u.%u, client protocol %u.%u", s->major,
                 s->minor, CHAN_PROTO_MAJOR, CHAN_PROTO_MINOR);
        return -1;
    }
    if (s->size != c->size || s->ring_off != off_ring() || s->ring_size != CHAN_RING_SIZE ||
        s->lanes_off != off_lanes() || s->nlanes != CHAN_NLANES || s->lane_size != CHAN_LANE_SIZE ||
        s->staging_off != off_staging() || s->nslots != CHAN_NSLOTS ||
        s->slot_size != CHAN_SLOT_SIZE || s->devinfo_off != off_devinfo()) {
        snprintf(msg, msglen, "shared segment layout differs from this client's build");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- producer */

/* Rings the doorbell if the server sleeps. */
static void ring_kick(struct chan *c)
{
    struct chan_shm *s = c->shm;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->server_sleeping, memory_order_relaxed)) {
        atomic_fetch_add(&s->doorbell, 1);
        chan_futex_wake(&s->doorbell);
    }
}

struct chan_rec *chan_ring_reserve(struct chan *c, uint32_t size, const struct chan_wait *w)
{
    uint64_t span = CHAN_REC_SPAN(size);
    uint64_t pos = c->pos % CHAN_RING_SIZE;
    uint64_t room = CHAN_RING_SIZE - pos;
    /* Bytes to skip at the end of the ring so the record does not wrap. */
    uint64_t skip = room < span ? room : 0;
    uint64_t need = skip + span;
    struct chan_shm *s = c->shm;
    uint64_t spin_until = 0;
    for (;;) {
        uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
        if (c->pos + need - head <= CHAN_RING_SIZE) break;
        /* Full: the server is draining it, usually within microseconds. Spin first, so
         * that a flood of async calls does not cost a wake-up system call per record. */
        uint64_t now = chan_now_ns();
        if (!spin_until) {
            spin_until = now + CHAN_SPACE_SPIN_NS;
            ring_kick(c); /* records left unrung may be what fills it */
            c->unrung = 0;
        }
        if (now < spin_until) {
            chan_cpu_relax();
            continue;
        }
        /* Then sleep until the server has freed an eighth of the ring: more than any
         * record (with the bytes skipped before it) needs. The bell only grows. */
        uint32_t bell = atomic_load(&s->space_bell);
        atomic_fetch_add(&s->space_waiters, 1);
        head = atomic_load(&s->head);
        if (c->pos + need - head > CHAN_RING_SIZE)
            chan_futex_wait(&s->space_bell, bell, 50ull * 1000 * 1000);
        atomic_fetch_sub(&s->space_waiters, 1);
        if (atomic_load(&s->dead) || (w->alive && !w->alive(w->arg))) return NULL;
    }
    if (skip) {
        if (skip >= sizeof(struct chan_rec)) {
            struct chan_rec *pad = (struct chan_rec *)(c->ring + pos);
            memset(pad, 0, sizeof(*pad));
            pad->size = (uint32_t)skip;
            pad->op = CHAN_OP_PAD;
        }
        /* Fewer than a header's bytes: the consumer skips them by the same rule. */
        c->pos += skip;
    }
    struct chan_rec *r = (struct chan_rec *)(c->ring + c->pos % CHAN_RING_SIZE);
    memset(r, 0, sizeof(*r));
    r->size = size;
    return r;
}

/* 1 when the record just published may stay unrung (chan_shm.coalesce_us): the server lets
 * records wait, and neither the bound on their number nor on the first one's age is
 * reached. Only work for the GPU may wait: an operation whose %op row says `unrung` (a
 * launch), a copy the client marked CHAN_RF_GPU_WORK (asynchronous, its data in place or in
 * the record), or a generic call that asks for no reply (an asynchronous memset, copy between
 * device addresses, event record, stream wait). Whatever the client may wait on without a
 * reply of its own is rung at once: a copy through the staging slots, a host function, a
 * module's image.
 *
 * The marked copies are a PyTorch step's `.item()` (a copy into pinned memory, then the
 * stream's synchronisation): rung for, the copy woke the worker for the step's launches and
 * the synchronisation woke it again a few microseconds later. Left unrung, 16 PyTorch
 * processes on 16 CPUs of an H200 woke their workers 1.5-1.8 times a step instead of
 * 2.2-2.5, and were preempted 1.3 times instead of 1.9; their steps a second did not move
 * beyond the runs' spread (bench/results/issue29-2026-11-28, "A reference on one machine"). */
static int may_leave_unrung(struct chan *c, const struct chan_rec *r)
{
    uint32_t us = atomic_load_explicit(&c->shm->coalesce_us, memory_order_relaxed);
    if (!us || (r->flags & CHAN_RF_REPLY) || c->unrung >= CHAN_COALESCE_MAX ||
        (r->op >= CHAN_OP_BASE && !CHAN_OP_UNRUNG(r->op) && !(r->flags & CHAN_RF_GPU_WORK)))
        return 0;
    uint64_t now = chan_now_ns();
    if (!c->unrung)
        c->unrung_since = now;
    else if (now - c->unrung_since >= (uint64_t)us * 1000)
        return 0;
    c->unrung++;
    return 1;
}

void chan_ring_publish(struct chan *c, const struct chan_rec *r)
{
    struct chan_shm *s = c->shm;
    c->pos += CHAN_REC_SPAN(r->size);
    atomic_store_explicit(&s->tail, c->pos, memory_order_release);
    /* Pairs with the fence in chan_ring_sleep(): either the server sees the new tail
     * before it sleeps, or we see it sleeping and ring. */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&s->server_sleeping, memory_order_relaxed)) {
        c->unrung = 0; /* awake: it takes every record published so far before it sleeps */
        return;
    }
    if (may_leave_unrung(c, r)) return;
    c->unrung = 0;
    atomic_fetch_add(&s->doorbell, 1);
    chan_futex_wake(&s->doorbell);
}

/* ---------------------------------------------------------------- consumer */

void chan_ring_nudge(struct chan *c)
{
    struct chan_shm *s = c->shm;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->server_sleeping, memory_order_relaxed)) {
        atomic_fetch_add(&s->doorbell, 1);
        chan_futex_wake(&s->doorbell);
    }
}

int chan_ring_pending(const struct chan *c)
{
    return atomic_load_explicit(&c->shm->tail, memory_order_acquire) != c->pos;
}

/* Consumes n bytes: publishes the new head and wakes producers waiting for space. */
static void ring_advance(struct chan *c, uint64_t n)
{
    struct chan_shm *s = c->shm;
    c->pos += n;
    atomic_store_explicit(&s->head, c->pos, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    /* Wake a producer only once it can fit any record: one wake-up per eighth of the ring
     * instead of one per record. */
    if (atomic_load_explicit(&s->space_waiters, memory_order_relaxed) &&
        CHAN_RING_SIZE - (atomic_load(&s->tail) - c->pos) >= CHAN_RING_SIZE / 8) {
        atomic_fetch_add(&s->space_bell, 1);
        chan_futex_wake(&s->space_bell);
    }
}

enum chan_next chan_ring_next(struct chan *c, void *buf)
{
    struct chan_shm *s = c->shm;
    for (;;) {
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        if (tail == c->pos) return CHAN_NEXT_NONE;
        if (tail - c->pos > CHAN_RING_SIZE || (tail & 7u)) return CHAN_NEXT_BAD;
        uint64_t pos = c->pos % CHAN_RING_SIZE;
        uint64_t room = CHAN_RING_SIZE - pos;
        if (room < sizeof(struct chan_rec)) {
            ring_advance(c, room);
            continue;
        }
        /* Read each header field once: the client may change the ring under us. */
        volatile struct chan_rec *vr = (volatile struct chan_rec *)(c->ring + pos);
        uint32_t size = vr->size;
        uint16_t op = vr->op;
        uint64_t span = CHAN_REC_SPAN(size);
        if (size < sizeof(struct chan_rec) || span > room || span > tail - c->pos)
            return CHAN_NEXT_BAD;
        if (op == CHAN_OP_PAD) {
            ring_advance(c, span);
            continue;
        }
        if (size > CHAN_REC_MAX) return CHAN_NEXT_BAD;
        memcpy(buf, c->ring + pos, size);
        ((struct chan_rec *)buf)->size = size;
        ((struct chan_rec *)buf)->op = op;
        ring_advance(c, span);
        return CHAN_NEXT_REC;
    }
}

void chan_ring_sleep(struct chan *c, uint64_t timeout_ns)
{
    struct chan_shm *s = c->shm;
    uint32_t bell = atomic_load(&s->doorbell);
    atomic_store(&s->server_sleeping, 1);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&s->tail) == c->pos) {
        uint64_t t = CHAN_PROFILING ? chan_now_ns() : 0;
        chan_futex_wait(&s->doorbell, bell, timeout_ns);
        if (CHAN_PROFILING) {
            chan_prof_add(CHAN_PROF_RING_SLEEPS, 1);
            chan_prof_add(CHAN_PROF_RING_SLEEP_NS, chan_now_ns() - t);
        }
    }
    atomic_store(&s->server_sleeping, 0);
}

/* ---------------------------------------------------------------- lanes */

void chan_lane_post(struct chan *c, uint32_t lane, CUresult result, uint32_t len)
{
    struct chan_lane *l = &c->lanes[lane];
    l->result = result;
    l->len = len;
    atomic_fetch_add_explicit(&l->seq, 1, memory_order_release);
    chan_wake(&l->seq, &l->waiting);
}

void chan_lane_post_at(struct chan *c, uint32_t lane, CUresult result, uint32_t len, uint32_t seq)
{
    struct chan_lane *l = &c->lanes[lane];
    l->result = result;
    l->len = len;
    atomic_store_explicit(&l->seq, seq, memory_order_release);
    chan_wake(&l->seq, &l->waiting);
}

/* A thread that tires of spinning for a reply the GPU posts tells the worker, which polls
 * such waits slowly while their threads spin (server/core/worker.c), so that it wakes the thread
 * promptly once the GPU has posted. */
static void nudge(void *arg)
{
    chan_ring_nudge(arg);
}

int chan_lane_wait(struct chan *c, uint32_t lane, uint32_t seq0, const struct chan_wait *w)
{
    struct chan_lane *l = &c->lanes[lane];
    struct chan_wait x = *w;
    /* A reply the GPU will post (proto.h): spin longer for it. */
    if (w->gpu_spin_ns > w->spin_ns) {
        x.extend = &l->gpu_seq;
        x.extend_ns = w->gpu_spin_ns;
        x.nudge = nudge;
        x.nudge_arg = c;
    }
    return chan_wait_for(&l->seq, seq0 + 1, &l->waiting, &x);
}
