/* Large host memcpy split over a few threads. A pageable copy passes through the staging
 * slots, and one core's memcpy is slower than the DMA on the other side of the slot; a few
 * cores together keep up with it (bench/NOTES.md, "Pageable copy threads"). */
#define _GNU_SOURCE
#include "interpose/shim.h"
#include "channel/settings.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define PCOPY_MIN (1u << 20) /* below this, one memcpy is cheaper than waking helpers */
#define PCOPY_MAXT 8

/* One job at a time (job_lock: staged copies of a process's several connections may come
 * at once, memcpy.c); guarded by pool_lock. */
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;
static int nthreads = -1; /* helpers running; -1 until first use */
static uint64_t job_gen;  /* bumped per job */
static int pending;       /* helper parts of the current job not done yet */
static struct part {
    void *dst;
    const void *src;
    size_t n;
} parts[PCOPY_MAXT];

static void *helper(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        while (job_gen == seen)
            pthread_cond_wait(&pool_work, &pool_lock);
        seen = job_gen;
        struct part p = parts[me];
        pthread_mutex_unlock(&pool_lock);
        if (p.n) memcpy(p.dst, p.src, p.n);
        pthread_mutex_lock(&pool_lock);
        if (--pending == 0) pthread_cond_signal(&pool_done);
    }
    return NULL;
}

/* Helpers to start: MPSSHIM_COPY_THREADS, else half the CPUs we may run on less one, at most 5:
 * 5 helpers gave steady copies twice native's pageable rate and more both ways, more helpers
 * were faster once and slower the next time (bench/NOTES.md, "Pageable copy threads"). Helpers
 * run only during a copy of at least PCOPY_MIN. */
static int want_threads(void)
{
    unsigned long long want; /* at most PCOPY_MAXT (channel/settings.def) */
    if (chan_setting_get(CHAN_SET_COPY_THREADS, &want)) return (int)want;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    int n = cpus / 2 - 1; /* helpers besides the calling thread */
    return n < 0 ? 0 : n > 5 ? 5 : n;
}

static void start_pool(void)
{
    int want = want_threads();
    nthreads = 0;
    for (int i = 0; i < want; i++) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 64u << 10);
        if (pthread_create(&t, &at, helper, (void *)(intptr_t)i) == 0) nthreads++;
        pthread_attr_destroy(&at);
    }
}

/* A forked child has none of the parent's helper threads. */
static void pool_after_fork(void)
{
    pthread_mutex_init(&pool_lock, NULL);
    pthread_mutex_init(&job_lock, NULL);
    pthread_cond_init(&pool_work, NULL);
    pthread_cond_init(&pool_done, NULL);
    nthreads = -1;
    pending = 0;
}

void shim_pcopy(void *dst, const void *src, size_t n)
{
    if (n < PCOPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&pool_lock);
    if (nthreads < 0) {
        static int atfork_done;
        if (!atfork_done++) pthread_atfork(NULL, NULL, pool_after_fork);
        start_pool();
    }
    int k = nthreads;
    if (k == 0) {
        pthread_mutex_unlock(&pool_lock);
        pthread_mutex_unlock(&job_lock);
        memcpy(dst, src, n);
        return;
    }
    /* k helpers and this thread share the bytes, in cache-line-aligned pieces. */
    size_t piece = (n / (size_t)(k + 1) + 63) & ~(size_t)63;
    size_t off = 0;
    for (int i = 0; i < k; i++) {
        size_t len = off + piece <= n ? piece : n - off;
        parts[i] = (struct part){(char *)dst + off, (const char *)src + off, len};
        off += len;
    }
    pending = k;
    job_gen++;
    pthread_cond_broadcast(&pool_work);
    pthread_mutex_unlock(&pool_lock);
    memcpy((char *)dst + off, (const char *)src + off, n - off);
    pthread_mutex_lock(&pool_lock);
    while (pending)
        pthread_cond_wait(&pool_done, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_unlock(&job_lock);
}
