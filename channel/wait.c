/* Spin-then-futex waits on shared counters; see wait.h. */
#include "channel/wait.h"
#include "channel/prof.h"
#include "channel/slice.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long one sleep lasts before `alive` is asked again: bounds how late a dead peer is
 * noticed, and costs nothing while the peer is alive (the wake-up comes first). */
#define CHAN_SLEEP_SLICE_NS (50ull * 1000 * 1000)

uint64_t chan_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Shared (not FUTEX_PRIVATE) futexes: the words live in memory mapped by two processes. */
void chan_futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                          .tv_nsec = (long)(timeout_ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

void chan_futex_wake(_Atomic uint32_t *word)
{
    chan_prof_add(CHAN_PROF_WAKES, 1);
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* True while the thread should spin rather than sleep, `spent` ns into its wait. */
static int keep_spinning(const struct chan_wait *w, uint32_t want, uint64_t spent)
{
    if (spent < w->spin_ns) return 1;
    return w->extend && spent < w->extend_ns &&
           atomic_load_explicit(w->extend, memory_order_relaxed) == want;
}

int chan_wait_for(_Atomic uint32_t *word, uint32_t want, _Atomic uint32_t *waiters,
                  const struct chan_wait *w)
{
    uint32_t v = atomic_load_explicit(word, memory_order_acquire);
    if (chan_reached(v, want)) return 0;
    uint64_t start = chan_now_ns();
    unsigned spins = 0, every = w->yield_every ? w->yield_every : 16;
    chan_prof_add(CHAN_PROF_WAITS, 1);
    /* Asleep with a short slice, so that the wake-up takes a CPU from a poller at once
     * (slice.h); the thread's own slice is back before it returns to its caller. */
    struct chan_slice_saved saved = {0};
    int rc, nudged = 0;
    for (;;) {
        /* Spinning: until the spin is over (or, with an extension, while it applies: its
         * word may turn up while the thread sleeps, whose waker then wakes it to spin). */
        uint64_t spun = chan_now_ns();
        if (saved.valid && keep_spinning(w, want, spun - start)) {
            chan_slice_restore(&saved); /* spinning again: its own slice */
            saved.valid = 0;
        }
        while (keep_spinning(w, want, chan_now_ns() - start)) {
            for (int i = 0; i < 64; i++) {
                v = atomic_load_explicit(word, memory_order_acquire);
                if (chan_reached(v, want)) {
                    if (CHAN_PROFILING) chan_prof_add(CHAN_PROF_SPIN_NS, chan_now_ns() - spun);
                    rc = 0;
                    goto out;
                }
                chan_cpu_relax();
            }
            /* On an oversubscribed machine the peer may need this very CPU. */
            if (++spins % every == 0) sched_yield();
        }
        if (CHAN_PROFILING) chan_prof_add(CHAN_PROF_SPIN_NS, chan_now_ns() - spun);
        if (w->slice_ns && !saved.valid) (void)chan_slice_set(w->slice_ns, &saved);
        if (w->nudge && !nudged && w->extend &&
            atomic_load_explicit(w->extend, memory_order_relaxed) == want) {
            nudged = 1;
            w->nudge(w->nudge_arg);
        }
        atomic_fetch_add(waiters, 1);
        /* seq_cst pairs with the waker's fence in chan_wake(): either the waker sees us
         * counted, or we see its new value here and do not sleep. */
        v = atomic_load(word);
        uint64_t slept = CHAN_PROFILING ? chan_now_ns() : 0;
        if (!chan_reached(v, want)) {
            chan_futex_wait(word, v, CHAN_SLEEP_SLICE_NS);
            if (CHAN_PROFILING) {
                chan_prof_add(CHAN_PROF_SLEEPS, 1);
                chan_prof_add(CHAN_PROF_SLEEP_NS, chan_now_ns() - slept);
            }
        }
        atomic_fetch_sub(waiters, 1);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (chan_reached(v, want)) {
            rc = 0;
            break;
        }
        if (w->alive && !w->alive(w->arg)) {
            rc = -1;
            break;
        }
    }
out:
    chan_slice_restore(&saved);
    return rc;
}

void chan_wake(_Atomic uint32_t *word, _Atomic uint32_t *waiters)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(waiters, memory_order_relaxed)) chan_futex_wake(word);
}
