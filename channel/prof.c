/* See prof.h. */
#include "channel/prof.h"

#include <stdio.h>
#include <time.h>

uint64_t chan_thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef MPSSHIM_PROFILE
_Atomic uint64_t chan_prof[CHAN_PROF_N];

void chan_prof_format(char *buf, size_t len)
{
    uint64_t v[CHAN_PROF_N];
    for (int i = 0; i < CHAN_PROF_N; i++)
        v[i] = atomic_load_explicit(&chan_prof[i], memory_order_relaxed);
    snprintf(buf, len,
             "waits %llu, spin %.1f ms, sleeps %llu (%.1f ms), wakes %llu, ring sleeps %llu "
             "(%.1f ms)",
             (unsigned long long)v[CHAN_PROF_WAITS], v[CHAN_PROF_SPIN_NS] / 1e6,
             (unsigned long long)v[CHAN_PROF_SLEEPS], v[CHAN_PROF_SLEEP_NS] / 1e6,
             (unsigned long long)v[CHAN_PROF_WAKES], (unsigned long long)v[CHAN_PROF_RING_SLEEPS],
             v[CHAN_PROF_RING_SLEEP_NS] / 1e6);
}
#else
void chan_prof_format(char *buf, size_t len)
{
    if (len) buf[0] = '\0';
}
#endif
