/* Doorbell coalescing (MPSSHIM_COALESCE_US): while the server is crowded, a client may leave
 * its launches unrung, so that its worker wakes once for a step's launches and the
 * synchronisation that ends it instead of once for each.
 *
 * Why: with as many busy clients as CPUs (spin.c's grades "short" and "off") every CPU is
 * wanted, by the clients' own programs and by the workers replaying their calls, and a
 * worker sleeps as soon as its ring is empty. A PyTorch step of 12 launches, a copy and a
 * synchronisation then costs the client a wake-up system call, and the server a sleep and a
 * wake-up of its worker, for most of its launches (about 150000 context switches a second
 * in the server at 16 processes on 16 CPUs, bench/README.md). The price: while coalescing,
 * a launch may start on the GPU up to the hint later than it would, so it is off while CPUs
 * are free.
 *
 * Alone it saved little (bench/README.md, "Fewer wake-ups"): the worker still launched a
 * step's kernels one by one and then spun on the synchronisation. With a step's launches
 * arriving together, seqgraph.c replays them as one graph (its gap rule takes the bound as
 * a burst's while coalescing), and the GPU posts the step's reply (waits.c gpu_reply): on an
 * H200 of 16 CPUs 16 PyTorch processes made 30746 steps/s with a bound of 1000 us, against
 * 25251 with the old settings in the same run and 26691 with the old code in another that
 * day (the machine's CPU a step 453 us against 573; native MPS's 339), and the cold MPI jobs
 * kept their times (bench/results/issue29-2026-11-28, "Coalesced steps as graphs"). Hence
 * the default, 1000 us.
 *
 * The protocol (proto.h, chan_shm.coalesce_us): the server writes the bound into the
 * segment while crowded and 0 otherwise; the client leaves a record unrung only if it is a
 * launch, an asynchronous copy it marked as work for the GPU alone (CHAN_RF_GPU_WORK), or a
 * generic call that asks for no reply, at most CHAN_COALESCE_MAX of them and none older than
 * the bound; its next record that waits rings for them all. A client that
 * goes quiet with records left unrung is covered by this file's sweeper: every half bound
 * it wakes each worker that sleeps while its ring holds a record it held at the sweeper's
 * last look. The sweeper reads
 * only words the client may write (tail, server_sleeping), and only to decide whether to
 * wake a worker: a lying client earns its worker a spurious wake-up a period at most. */
#include "server/core/server.h"
#include "server/core/coalesce.h"
#include "channel/settings.h"

#include <stdlib.h>
#include <time.h>

/* MPSSHIM_COALESCE_US: the bound in µs; 0 turns coalescing off. Set at start. */
static uint32_t bound_us;

void srv_coalesce_init(void)
{
    bound_us = (uint32_t)chan_setting_num(CHAN_SET_COALESCE_US);
}

/* A client's (its coalesce): the bound last written into its segment, the worker's own;
 * the sweeper reads `on` (that bound is not 0) under clients_lock, and keeps `swept_tail`,
 * its own: the ring's tail at its last look. */
struct srv_coalesce {
    uint32_t hint;
    _Atomic int on;
    uint64_t swept_tail;
};

void srv_coalesce_publish(struct srv_client *c, int crowded)
{
    uint32_t co = crowded ? bound_us : 0;
    if (co != c->coalesce->hint) {
        c->coalesce->hint = co;
        atomic_store_explicit(&c->ch.shm->coalesce_us, co, memory_order_relaxed);
        atomic_store_explicit(&c->coalesce->on, co != 0, memory_order_relaxed);
    }
}

uint32_t srv_coalesce_now_us(const struct srv_client *c)
{
    return c->coalesce ? c->coalesce->hint : 0;
}

/* Wakes c's worker if it sleeps while its ring holds a record that was there at the last
 * look, half a bound ago (positions only grow: the head still short of the tail then seen).
 * Why not any record: a client in the middle of a step leaves its launches unrung by design,
 * and waking its worker for them costs a wake-up and a sleep more a step, and the worker,
 * holding them for the rest of the step (seqgraph.c), launches nothing sooner. On the CPU
 * test driver, two crowded fleetc processes of 12 launches spread over 600 us a step
 * (about 9000 steps in 3 s): the sweeper woke their workers 9558 times when it woke for any
 * record, 938 times with this rule. (A crowded PyTorch fleet's workers on an H200 slept
 * 1.9-2.0 times a step where the step needs one, with the old rule:
 * bench/results/issue29-2026-11-28, "Coalesced steps as graphs"; this rule is not yet
 * measured on a GPU.) A record the client leaves unrung waits at most about its bound: the
 * client rings once its oldest is that old (chan.c), and a client gone quiet is swept
 * within half a bound to a bound. clients_lock held (c->shm stays mapped). */
static void sweep_one(struct srv_client *c)
{
    struct chan_shm *s = c->ch.shm;
    uint64_t seen = c->coalesce->swept_tail;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
    c->coalesce->swept_tail = tail;
    if (!atomic_load_explicit(&s->server_sleeping, memory_order_acquire)) return;
    uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
    if (head == tail || head >= seen) return; /* nothing, or nothing older than the last look */
    atomic_fetch_add(&s->doorbell, 1);
    chan_futex_wake(&s->doorbell);
}

static void *sweeper(void *arg)
{
    (void)arg;
    for (;;) {
        int any = 0;
        pthread_mutex_lock(&srv.clients_lock);
        for (struct srv_client *x = srv.clients; x; x = x->next)
            if (x->shm && atomic_load(&x->connected) && !atomic_load(&x->finished) &&
                atomic_load_explicit(&x->coalesce->on, memory_order_relaxed)) {
                any = 1;
                sweep_one(x);
            }
        pthread_mutex_unlock(&srv.clients_lock);
        /* Every half bound while some client may leave records unrung (sweep_one says how
         * long a record waits); else ten times a second, to notice the next. */
        uint64_t ns = any ? (uint64_t)bound_us * 500 : 100ull * 1000 * 1000;
        struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

void srv_coalesce_start(void)
{
    if (!bound_us) return;
    pthread_t t;
    if (pthread_create(&t, NULL, sweeper, NULL) != 0) {
        srv_log("Doorbell coalescing is off: its sweeper thread could not start");
        bound_us = 0;
        return;
    }
    pthread_detach(t);
    srv_log("Doorbell coalescing while crowded: a client's launches may wait up to %u us for "
            "its next call that waits (MPSSHIM_COALESCE_US)",
            (unsigned)bound_us);
}

SRV_CLIENT_STATE(coalesce, coalesce)

const struct srv_family srv_family_coalesce = {.name = "coalesce",
                                               SRV_CLIENT_STATE_HOOKS(coalesce)};
