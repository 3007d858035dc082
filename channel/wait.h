/* Waiting on a 32-bit counter in shared memory: spin briefly, then sleep on a futex.
 *
 * Used by both ends for reply lanes, ring space and staging slots. Counters only grow
 * (mod 2^32), so "reached" is a signed difference and a spurious or late wake-up is
 * harmless. A sleeper first counts itself in `waiters`, so that the waker can skip the
 * system call when nobody sleeps: the common, spinning case costs no syscall at all. */
#ifndef MPSSHIM_WAIT_H
#define MPSSHIM_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

struct chan_wait {
    uint64_t spin_ns;        /* spin this long before sleeping */
    int (*alive)(void *arg); /* called between sleeps: 0 = give up */
    void *arg;
    /* While asleep, the thread's scheduler slice (channel/slice.h) in ns; 0: unchanged. */
    uint64_t slice_ns;
    /* Lane waits (chan_lane_wait): how long to spin for a reply the GPU posts. */
    uint64_t gpu_spin_ns;
    /* Spin up to extend_ns rather than spin_ns while *extend is the value waited for (set
     * by chan_lane_wait: a reply the GPU posts); NULL: no extension. */
    _Atomic uint32_t *extend;
    uint64_t extend_ns;
    /* Called once, before the thread first sleeps while the extension applies. */
    void (*nudge)(void *arg);
    void *nudge_arg;
    /* While spinning: sched_yield after this many batches of 64 looks; 0: 16 (1024 looks). */
    unsigned yield_every;
};

/* True when counter value `v` has reached `want` (mod 2^32). */
static inline int chan_reached(uint32_t v, uint32_t want)
{
    return (int32_t)(v - want) >= 0;
}

/* Waits until *word reaches `want`. 0 when it did, -1 when w->alive said to give up. */
int chan_wait_for(_Atomic uint32_t *word, uint32_t want, _Atomic uint32_t *waiters,
                  const struct chan_wait *w);

/* Wakes every sleeper of `word` (after the caller has advanced it), if there are any. */
void chan_wake(_Atomic uint32_t *word, _Atomic uint32_t *waiters);

/* Sleeps on `word` while it still equals `seen`, at most `timeout_ns`. Returns at once
 * if it changed. Spurious returns are possible. */
void chan_futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t timeout_ns);
void chan_futex_wake(_Atomic uint32_t *word);

/* A pause for spin loops. */
static inline void chan_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Monotonic clock in nanoseconds. */
uint64_t chan_now_ns(void);

#endif
