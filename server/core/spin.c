/* When waiting threads may spin: the server's workers between requests, and (through a
 * hint in each client's segment) the client threads waiting for replies. And the scheduler
 * slice the server's threads ask for (MPSSHIM_SERVER_SLICE_US, channel/slice.h says why).
 *
 * Spinning buys microseconds only while there are idle CPUs to spin on. Each busy client
 * wants two at once: its own thread, which runs the program between calls, and its worker
 * here, which replays them. So the server counts its busy clients — those whose worker
 * replayed a record in the last SRV_BUSY_NS — against the CPUs, in three grades:
 *   - "on": busy clients at most half the CPUs: workers spin for requests
 *     (MPSSHIM_SERVER_SPIN_US) and clients for replies as long as they like;
 *   - "short": more than half, at most all of them: workers sleep as soon as their ring is
 *     empty (MPSSHIM_CROWDED_WORKER_SPIN_US, 0) and clients spin MPSSHIM_CROWDED_SPIN_US
 *     (200 us) for a reply, which covers the worker's taking a synchronisation and queuing
 *     the GPU's reply (the spin for the GPU's own store is MPSSHIM_CROWDED_GPU_SPIN_US, in
 *     the client);
 *   - "off": more busy clients than CPUs: clients spin only SRV_OFF_SPIN_US, enough for a
 *     reply already on its way.
 * Spinning always cost a crowded fleet two thirds of its steps, and on the CPU test driver
 * clients on too few CPUs made nearly twice the steps with no spinning (bench/NOTES.md,
 * "Spinning grades"). A client waiting for a long synchronisation stops counting as busy after
 * SRV_BUSY_NS, as it uses no CPU then.
 *
 * Only the server writes the hint and the server never reads it back: a client that
 * overwrites it changes nothing but its own spinning. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/coalesce.h"
#include "server/core/spin.h"

#include "channel/settings.h"
#include "channel/slice.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* A client's (its spin), the worker's own: counted busy until busy_until; the spin hint
 * last written into its segment. */
struct srv_spin {
    int busy;
    uint64_t busy_until;
    uint32_t spin_hint;
};

/* A client is busy this long after its worker last replayed a record. */
#define SRV_BUSY_NS (2ull * 1000 * 1000)
/* What the server lets a client spin for a reply, in µs, in grade "off" (grade "short":
 * MPSSHIM_CROWDED_SPIN_US). */
#define SRV_OFF_SPIN_US 3u

/* MPSSHIM_CROWDED_SPIN_US's default (channel/settings.def), 200, as long as a client's own
 * spin (MPSSHIM_SPIN_US): in grade "short" a thread that rang for a synchronisation spins
 * while its worker wakes, takes the step and queues the GPU's reply, then on for the GPU's
 * store. It was 30 us, from when the worker itself replied: a thread then slept whenever its
 * worker took longer to be scheduled, and its CPU often stood idle meanwhile. On an H200 of 16
 * CPUs (bench/cpusplit.py, 16 processes; bench/results/issue29-2026-11-28, "A crowded
 * client's first spin") 200 us against 30: the PyTorch fleet 35230-38372 steps/s against
 * 33541-36677 (three rounds, each ahead), idle CPU 6-11 us a step against 29-48, the
 * clients' sleeps 0.02-0.04 a step against 0.19-0.25; the driver-API fleet (fleetc)
 * 103360-104148 against 94118-98324 (MPS 94173); the cold MPI jobs of 16 and 32 ranks as
 * before (0.060-0.069 s). 1000 us (with MPSSHIM_SPIN_US=1000) did no better than 200. */

/* MPSSHIM_CROWDED_SYNC_SPIN_US's default (channel/settings.def), 50: while crowded, a
 * worker's spin on a synchronisation before it sleeps for the GPU's interrupt, in µs
 * (waits.c block_stream). 50 us covers a crowded fleet's short steps (without
 * it the fleet made a quarter fewer steps; 50 us made as many as the driver's own spin
 * throughout, 200 us little more), and a cold MPI job's waits of ms still sleep
 * (bench/NOTES.md, "block_stream spin"). */

/* MPSSHIM_SERVER_SLICE_US's default, 100: the scheduler slice the server's threads ask for,
 * in µs (channel/slice.h): the kernel's shortest. A worker runs a few µs to a few hundred per
 * wake-up; the driver's own threads (its blocking synchronisation and callbacks) as little. */

/* The CPUs the policy counts (MPSSHIM_SPIN_CPUS, else the server's affinity mask) and the
 * busy clients; both only ever touched atomically. */
static unsigned ncpu = 1;
static _Atomic unsigned busy;
/* While crowded: the clients' spin for a reply in grade "short" (MPSSHIM_CROWDED_SPIN_US)
 * and the workers' for requests (MPSSHIM_CROWDED_WORKER_SPIN_US), set at start so that one
 * bench run can compare settings as variants (bench/run.sh --variant). */
static unsigned short_spin_us;
static uint64_t crowded_worker_ns;
/* While crowded: how long a worker spins on a synchronisation before it sleeps for the GPU's
 * interrupt (MPSSHIM_CROWDED_SYNC_SPIN_US, waits.c block_stream). */
static uint64_t crowded_sync_ns;
/* The scheduler slice the server's threads ask for (MPSSHIM_SERVER_SLICE_US; 0: the
 * kernel's), and the kernel's answer (0: taken; chan_slice_set's error), said in the log. */
static uint64_t worker_slice_ns;
static int slice_err;

void srv_spin_log_settings(void)
{
    if (worker_slice_ns && slice_err)
        srv_log("The server's threads keep the kernel's scheduler slice: asking for %llu us "
                "failed (%s)",
                (unsigned long long)(worker_slice_ns / 1000),
                slice_err < 0 ? "not a fair-scheduled process" : strerror(slice_err));
}

void srv_spin_init(void)
{
    long n = (long)chan_setting_num(CHAN_SET_SPIN_CPUS);
    if (n <= 0) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    ncpu = n > 0 && n < 1 << 20 ? (unsigned)n : 1;
    short_spin_us = (unsigned)chan_setting_num(CHAN_SET_CROWDED_SPIN_US);
    crowded_worker_ns = chan_setting_num(CHAN_SET_CROWDED_WORKER_SPIN_US) * 1000;
    crowded_sync_ns = chan_setting_num(CHAN_SET_CROWDED_SYNC_SPIN_US) * 1000;
    worker_slice_ns = chan_setting_num(CHAN_SET_SERVER_SLICE_US) * 1000;
    /* Asked for by the main thread before the driver is loaded and any thread made: every
     * thread of the process inherits it, the driver's included (their wake-ups are on the
     * clients' path too: a blocking synchronisation's interrupt, host functions). */
    if (worker_slice_ns) slice_err = chan_slice_set(worker_slice_ns, NULL);
}

uint64_t srv_spin_worker_ns(void)
{
    return srv_spin_crowded() ? crowded_worker_ns : srv.idle_spin_ns;
}

uint64_t srv_spin_sync_ns(void)
{
    return crowded_sync_ns;
}

void srv_spin_describe(unsigned *nbusy, unsigned *cpus)
{
    *nbusy = atomic_load_explicit(&busy, memory_order_relaxed);
    *cpus = ncpu;
}

int srv_spin_crowded(void)
{
    return 2 * atomic_load_explicit(&busy, memory_order_relaxed) > ncpu;
}

const char *srv_spin_grade(void)
{
    unsigned b = atomic_load_explicit(&busy, memory_order_relaxed);
    return 2 * b <= ncpu ? "on" : b <= ncpu ? "short" : "off";
}

/* Writes the hint into the client's segment when it differs from the last one written
 * (a private copy: the segment's word is never read back). */
static void publish(struct srv_client *c)
{
    unsigned b = atomic_load_explicit(&busy, memory_order_relaxed);
    uint32_t hint = 2 * b <= ncpu ? 0 : b <= ncpu ? short_spin_us + 1 : SRV_OFF_SPIN_US + 1;
    if (hint != c->spin->spin_hint) {
        c->spin->spin_hint = hint;
        atomic_store_explicit(&c->ch.shm->spin_hint_us, hint, memory_order_relaxed);
    }
    srv_coalesce_publish(c, 2 * b > ncpu);
}

void srv_spin_worked(struct srv_client *c, uint64_t now)
{
    c->spin->busy_until = now + SRV_BUSY_NS;
    if (!c->spin->busy) {
        c->spin->busy = 1;
        atomic_fetch_add_explicit(&busy, 1, memory_order_relaxed);
    }
    publish(c);
}

uint64_t srv_spin_idle(struct srv_client *c, uint64_t now)
{
    if (c->spin->busy && now >= c->spin->busy_until) {
        c->spin->busy = 0;
        atomic_fetch_sub_explicit(&busy, 1, memory_order_relaxed);
    }
    publish(c);
    return c->spin->busy ? c->spin->busy_until - now : UINT64_MAX;
}

void srv_spin_gone(struct srv_client *c)
{
    if (c->spin->busy) {
        c->spin->busy = 0;
        atomic_fetch_sub_explicit(&busy, 1, memory_order_relaxed);
    }
}

SRV_CLIENT_STATE(spin, spin)

const struct srv_family srv_family_spin = {.name = "spin", SRV_CLIENT_STATE_HOOKS(spin)};
