/* Where a process's waiting goes, to find it before changing anything (issue 12): counters
 * kept only in a build made with `make PROFILE=1` (-DMPSSHIM_PROFILE); in every other build
 * the calls compile to nothing. Process-wide: the server's are all its workers' together,
 * and each worker keeps its client's own share (server/core/worker.c). */
#ifndef MPSSHIM_PROF_H
#define MPSSHIM_PROF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum chan_prof_counter {
    CHAN_PROF_WAITS,       /* chan_wait_for calls that did not find their value at once */
    CHAN_PROF_SPIN_NS,     /* time those spent spinning */
    CHAN_PROF_SLEEPS,      /* futex sleeps in them */
    CHAN_PROF_SLEEP_NS,    /* time asleep */
    CHAN_PROF_WAKES,       /* futex wake calls made (each a system call) */
    CHAN_PROF_RING_SLEEPS, /* server: sleeps waiting for records */
    CHAN_PROF_RING_SLEEP_NS,
    CHAN_PROF_N
};

#ifdef MPSSHIM_PROFILE
#define CHAN_PROFILING 1
extern _Atomic uint64_t chan_prof[CHAN_PROF_N];
static inline void chan_prof_add(enum chan_prof_counter k, uint64_t v)
{
    atomic_fetch_add_explicit(&chan_prof[k], v, memory_order_relaxed);
}
#else
#define CHAN_PROFILING 0
static inline void chan_prof_add(enum chan_prof_counter k, uint64_t v)
{
    (void)k;
    (void)v;
}
#endif

/* The counters as one line ("waits 12, spin 0.3 ms, sleeps 2 (4.1 ms), wakes 7, ring sleeps
 * 3 (120.0 ms)"); "" in a build without profiling. */
void chan_prof_format(char *buf, size_t len);

/* The calling thread's CPU time, ns (profiles only: a system call on some kernels). */
uint64_t chan_thread_cpu_ns(void);

#endif
