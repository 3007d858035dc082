/* multithread [threads]: threads sharing the primary context. Each worker (4 by default)
 * has its own stream and buffers and runs rounds of copies and kernels, checking every
 * round. Meanwhile a producer thread queues async work and an observer thread, released by
 * a barrier only after the queueing, synchronizes on it (stream, context, event): a sync
 * from one thread must see async work another thread submitted before it. Then every thread
 * makes and destroys events and streams as fast as it can (handle churn): a handle one
 * thread destroys may come back at once as another thread's new one, and each thread's own
 * handles must keep working. Threads report through their argument; main prints the
 * results in a fixed order. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 12
#define MS 1000000ull

static CUcontext g_ctx;
static CUfunction f_muladd, f_inc, f_delay;

struct worker {
    int index;
    char err[256];
};

/* Stops the thread's work with a message naming the failed call. */
#define TRY(w, call)                                                                               \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            snprintf((w)->err, sizeof(w)->err, "line %d: %s returned %s", __LINE__, #call,         \
                     t_errname(r_));                                                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Rounds of: pattern HtoDAsync, p = p * 3 + index, p += 1, DtoHAsync, stream sync, check;
 * every third round reads back with a synchronous pageable copy instead. */
static void *worker_body(void *arg)
{
    struct worker *w = arg;
    CUstream s = NULL;
    CUdeviceptr p = 0;
    uint32_t *pin = NULL, *pin_out = NULL, *pageable = NULL;
    unsigned long long n = (1 << 18) + 1000ull * w->index;

    TRY(w, cuCtxSetCurrent(g_ctx));
    TRY(w, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    TRY(w, cuMemAlloc(&p, n * 4));
    TRY(w, cuMemAllocHost((void **)&pin, n * 4));
    TRY(w, cuMemAllocHost((void **)&pin_out, n * 4));
    pageable = malloc(n * 4);
    if (!pageable) {
        snprintf(w->err, sizeof w->err, "out of host memory");
        goto out;
    }
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t seed = (uint32_t)(w->index * 1000 + round);
        int mul = 3, add = w->index;
        /* 28-bit values: p * 3 + index stays clear of signed overflow. */
        for (unsigned long long i = 0; i < n; i++)
            pin[i] = t_pattern_at(seed, i) & 0x0fffffffu;
        TRY(w, cuMemcpyHtoDAsync(p, pin, n * 4, s));
        void *ma[] = {&p, &mul, &add, &n}, *ia[] = {&p, &n};
        TRY(w, cuLaunchKernel(f_muladd, 256, 1, 1, 256, 1, 1, 0, s, ma, NULL));
        TRY(w, cuLaunchKernel(f_inc, 128, 1, 1, 256, 1, 1, 0, s, ia, NULL));
        uint32_t *got = pin_out;
        if (round % 3 == 2) {
            TRY(w, cuStreamSynchronize(s));
            TRY(w, cuMemcpyDtoH(pageable, p, n * 4));
            got = pageable;
        } else {
            /* Not into `pin`: the HtoD copy queued above may not have read it yet. */
            memset(pin_out, 0, n * 4);
            TRY(w, cuMemcpyDtoHAsync(pin_out, p, n * 4, s));
            TRY(w, cuStreamSynchronize(s));
        }
        for (unsigned long long i = 0; i < n; i++) {
            uint32_t want = (t_pattern_at(seed, i) & 0x0fffffffu) * 3u + (uint32_t)add + 1u;
            if (got[i] != want) {
                snprintf(w->err, sizeof w->err, "round %d: element %llu is %u, want %u", round, i,
                         got[i], want);
                goto out;
            }
        }
    }
out:
    if (pin) cuMemFreeHost(pin);
    if (pin_out) cuMemFreeHost(pin_out);
    if (p) cuMemFree(p);
    if (s) cuStreamDestroy(s);
    free(pageable);
    return NULL;
}

/* ------------------------------------------------------------ handle churn */

#define CHURN_ROUNDS 400

/* Rounds of: an event and a stream made, the event recorded on the stream and waited for,
 * both destroyed; every call must succeed. */
static void *churn_body(void *arg)
{
    struct worker *w = arg;
    CUevent ev = NULL;
    CUstream s = NULL;
    TRY(w, cuCtxSetCurrent(g_ctx));
    for (int round = 0; round < CHURN_ROUNDS; round++) {
        TRY(w, cuEventCreate(&ev, round % 2 ? CU_EVENT_DISABLE_TIMING : CU_EVENT_DEFAULT));
        TRY(w, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        TRY(w, cuEventRecord(ev, s));
        TRY(w, cuEventSynchronize(ev));
        TRY(w, cuEventQuery(ev));
        TRY(w, cuStreamDestroy(s));
        s = NULL;
        TRY(w, cuEventDestroy(ev));
        ev = NULL;
    }
out:
    if (s) cuStreamDestroy(s);
    if (ev) cuEventDestroy(ev);
    return NULL;
}

/* ------------------------------------------------------------ producer and observer */

static pthread_barrier_t g_queued, g_checked;

struct pair {
    CUstream s;
    CUevent ev;
    CUdeviceptr flag, x;
    uint32_t *out; /* pinned: out[0] flag, out[1] x */
    char perr[256], oerr[256];
};

/* Three rounds: queue a delayed store and a mul_add on pair->s with pinned readbacks, then
 * let the observer synchronize. The producer itself never waits on the GPU. */
static void *producer_body(void *arg)
{
    struct pair *pr = arg;
    struct worker tw = {0};
    struct worker *w = &tw;
    int round = 0;
    TRY(w, cuCtxSetCurrent(g_ctx));
    for (; round < 3; round++) {
        unsigned value = 500 + round;
        unsigned long long ns = 200 * MS, one = 1;
        int mul = 2, add = round;
        void *da[] = {&pr->flag, &value, &ns}, *ma[] = {&pr->x, &mul, &add, &one};
        TRY(w, cuLaunchKernel(f_delay, 1, 1, 1, 32, 1, 1, 0, pr->s, da, NULL));
        TRY(w, cuLaunchKernel(f_muladd, 1, 1, 1, 32, 1, 1, 0, pr->s, ma, NULL));
        TRY(w, cuMemcpyDtoHAsync(&pr->out[0], pr->flag, 4, pr->s));
        TRY(w, cuMemcpyDtoHAsync(&pr->out[1], pr->x, 4, pr->s));
        TRY(w, cuEventRecord(pr->ev, pr->s));
        pthread_barrier_wait(&g_queued);
        pthread_barrier_wait(&g_checked);
    }
out:
    if (tw.err[0]) {
        snprintf(pr->perr, sizeof pr->perr, "%s", tw.err);
        /* Meet the observer at the barriers of the rounds left, so that it ends too. */
        for (; round < 3; round++) {
            pthread_barrier_wait(&g_queued);
            pthread_barrier_wait(&g_checked);
        }
    }
    return NULL;
}

/* Round 0 waits with cuStreamSynchronize, round 1 with cuCtxSynchronize, round 2 with
 * cuEventSynchronize; each time the results must already be in the pinned buffer. */
static void *observer_body(void *arg)
{
    struct pair *pr = arg;
    struct worker tw = {0};
    struct worker *w = &tw;
    int x = 1;
    CUresult r = cuCtxSetCurrent(g_ctx);
    for (int round = 0; round < 3; round++) {
        pthread_barrier_wait(&g_queued);
        if (r == CUDA_SUCCESS && !pr->perr[0]) {
            if (round == 0)
                r = cuStreamSynchronize(pr->s);
            else if (round == 1)
                r = cuCtxSynchronize();
            else
                r = cuEventSynchronize(pr->ev);
            x = x * 2 + round;
            if (r != CUDA_SUCCESS)
                snprintf(w->err, sizeof w->err, "round %d: sync returned %s", round, t_errname(r));
            else if (pr->out[0] != 500u + round || (int)pr->out[1] != x)
                snprintf(w->err, sizeof w->err, "round %d: saw flag %u x %d, want %u and %d", round,
                         pr->out[0], (int)pr->out[1], 500u + round, x);
            if (w->err[0] && !pr->oerr[0]) snprintf(pr->oerr, sizeof pr->oerr, "%s", w->err);
        }
        pthread_barrier_wait(&g_checked);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    t_init("multithread", 300);
    int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    REQUIRE(nthreads >= 1 && nthreads <= 64, "bad thread count");
    CUdevice dev;
    t_setup(&dev, &g_ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_muladd = t_get_function(mod, "mul_add_i32");
    f_inc = t_get_function(mod, "inc_u32");
    f_delay = t_get_function(mod, "delay_set");

    struct pair pr;
    memset(&pr, 0, sizeof pr);
    CHECK(cuStreamCreate(&pr.s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&pr.ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemAlloc(&pr.flag, 4));
    CHECK(cuMemAlloc(&pr.x, 4));
    CHECK(cuMemAllocHost((void **)&pr.out, 8));
    CHECK(cuMemsetD32(pr.flag, 0, 1));
    CHECK(cuMemsetD32(pr.x, 1, 1));
    CHECK(cuCtxSynchronize());
    pr.out[0] = pr.out[1] = 0;
    pthread_barrier_init(&g_queued, NULL, 2);
    pthread_barrier_init(&g_checked, NULL, 2);
    t_ok("setup");

    struct worker *ws = calloc(nthreads, sizeof *ws);
    pthread_t *th = calloc(nthreads + 2, sizeof *th);
    REQUIRE(ws && th, "out of host memory");
    for (int i = 0; i < nthreads; i++) {
        ws[i].index = i;
        REQUIRE(pthread_create(&th[i], NULL, worker_body, &ws[i]) == 0, "pthread_create");
    }
    REQUIRE(pthread_create(&th[nthreads], NULL, producer_body, &pr) == 0, "pthread_create");
    REQUIRE(pthread_create(&th[nthreads + 1], NULL, observer_body, &pr) == 0, "pthread_create");
    for (int i = 0; i < nthreads + 2; i++)
        pthread_join(th[i], NULL);

    for (int i = 0; i < nthreads; i++) {
        REQUIRE(!ws[i].err[0], "worker %d: %s", i, ws[i].err);
        t_ok("worker %d: %d rounds of copies and kernels on its own stream", i, ROUNDS);
    }
    REQUIRE(!pr.perr[0], "producer: %s", pr.perr);
    REQUIRE(!pr.oerr[0], "observer: %s", pr.oerr);
    t_ok("cuStreamSynchronize in one thread sees async work queued by another");
    t_ok("cuCtxSynchronize in one thread sees async work queued by another");
    t_ok("cuEventSynchronize in one thread sees an event recorded by another");

    memset(ws, 0, nthreads * sizeof *ws);
    for (int i = 0; i < nthreads; i++) {
        ws[i].index = i;
        REQUIRE(pthread_create(&th[i], NULL, churn_body, &ws[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < nthreads; i++)
        REQUIRE(!ws[i].err[0], "churn %d: %s", i, ws[i].err);
    t_ok("%d threads made and destroyed %d events and streams each, every call succeeding",
         nthreads, CHURN_ROUNDS);

    CHECK(cuCtxSynchronize());
    CHECK(cuMemFreeHost(pr.out));
    CHECK(cuMemFree(pr.flag));
    CHECK(cuMemFree(pr.x));
    CHECK(cuEventDestroy(pr.ev));
    CHECK(cuStreamDestroy(pr.s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    free(ws);
    free(th);
    t_pass();
}
