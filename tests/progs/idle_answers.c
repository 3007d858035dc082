/* idle_answers [--ipc | --deferred | --hold GO1 GO2 | --copy GO1 GO2]: queries and synchronisations
 * of what is already idle, and what must make them answer otherwise. Through the shim such answers
 * are given in the client without a round trip (interpose/idle.c) as long as nothing could have
 * changed them; every answer here must be the driver's.
 *
 *   (no flag)   a stream's query and synchronisation after its synchronisation, again and
 *               again; a long kernel launched after that (NOT_READY, and the synchronisation
 *               waits for it); cuCtxSynchronize likewise; an event recorded again behind a
 *               long kernel; work on another stream; copies that return complete (into
 *               pageable memory, synchronous ones) and one that does not; the legacy and the
 * per-thread default streams, from two threads; destroyed streams and events and new ones; four
 *               threads polling streams of their own at once.
 *   --ipc       an interprocess event recorded again by the other process (the owner, then
 *               the opener) behind a long kernel: NOT_READY in the process that had found it
 *               complete and sent nothing since. Two processes (fork before any CUDA call).
 *   --deferred  (through the shim only; two devices) an event recorded on a stream of
 *               another device's context: natively refused at once, through the shim
 *               refused by the server and reported at the next synchronisation, which must
 *               report it even when a query had found the stream idle just before.
 *   --copy GO1 GO2  for tests/idle.sh: a copy into pageable memory makes its stream's
 *               answers known; after the file GO1 they are asked 1000 times (no round trip);
 *               it exits after GO2.
 *   --hold      for tests/idle.sh: makes every kind of idle answer known, prints "ready",
 *               waits for the file GO1, asks them all 1000 times (no round trip through the
 *               shim: the script checks the server saw no request), prints "queried", waits
 *               for GO2 (meanwhile the script faults the shared context or terminates this
 *               client) and prints what each call answers then.
 * NOT_READY right after a long kernel was queued assumes the queueing takes less than its
 * 500 ms (200 ms, as tests/progs/streams_events has, was once not enough on a loaded CI
 * machine under ASan). */
#include "tests/progs/common.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ull /* nanoseconds */
#define LONG_NS (500 * MS)
#define NTHREADS 4

/* The per-thread default stream variants: cuda.h declares them only in per-thread mode. */
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);

static CUcontext g_ctx;
static CUfunction f_delay;

static void delay_set(CUstream st, CUdeviceptr flag, unsigned value, unsigned long long ns)
{
    void *args[] = {&flag, &value, &ns};
    CHECK(cuLaunchKernel(f_delay, 1, 1, 1, 32, 1, 1, 0, st, args, NULL));
}

/* The word at p, once the work that stores it is known complete. */
static uint32_t read_u32(CUdeviceptr p)
{
    uint32_t v = 0;
    CHECK(cuMemcpyDtoH(&v, p, 4));
    return v;
}

static void set_u32(CUdeviceptr p, uint32_t v)
{
    CHECK(cuMemcpyHtoD(p, &v, 4));
    CHECK(cuCtxSynchronize());
}

static void setup(void)
{
    CUdevice dev;
    t_setup(&dev, &g_ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_delay = t_get_function(mod, "delay_set");
}

/* ------------------------------------------------------------ one stream, one event */

static void after_sync(CUstream s, CUdeviceptr flag)
{
    set_u32(flag, 0);
    delay_set(s, flag, 1, 1 * MS);
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < 1000; i++)
        EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    for (int i = 0; i < 100; i++)
        EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
    REQUIRE(read_u32(flag) == 1, "the kernel's store is not there after the synchronisation");
    t_ok("an idle stream's queries and synchronisations after its synchronisation: "
         "CUDA_SUCCESS, every time");
}

static void new_launch(CUstream s, CUdeviceptr flag)
{
    EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    delay_set(s, flag, 2, LONG_NS);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(read_u32(flag) == 2, "the synchronisation returned before the long kernel ended");
    EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    t_ok("a long kernel after an idle answer: NOT_READY, and the synchronisation waits for it");
}

static void ctx_sync(CUstream s, CUstream s2, CUdeviceptr flag, CUdeviceptr flag2)
{
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSynchronize());
    EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
    delay_set(s, flag, 3, LONG_NS);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK(cuCtxSynchronize());
    REQUIRE(read_u32(flag) == 3, "cuCtxSynchronize returned before the long kernel ended");
    EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    EXPECT(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
    t_ok("cuCtxSynchronize after an idle one waits for a new long kernel");
    /* The stream a launch just went to is taken as busy without asking the driver (the
     * server's fresh streams, waits.c): the other stream, given its long kernel a while ago,
     * must still be asked, and waited for. */
    delay_set(s2, flag2, 5, LONG_NS);
    usleep(20000);
    delay_set(s, flag, 6, LONG_NS);
    CHECK(cuCtxSynchronize());
    REQUIRE(read_u32(flag2) == 5, "cuCtxSynchronize right after a launch on one stream returned "
                                  "before another stream's long kernel ended");
    REQUIRE(read_u32(flag) == 6, "cuCtxSynchronize returned before the long kernel launched "
                                 "just before it ended");
    t_ok("cuCtxSynchronize right after a long launch waits for it and another stream's");
}

static void events(CUstream s, CUstream s2, CUdeviceptr flag, CUdeviceptr flag2)
{
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    EXPECT(cuEventQuery(e), CUDA_SUCCESS); /* never recorded */
    CHECK(cuEventRecord(e, s));
    CHECK(cuEventSynchronize(e));
    for (int i = 0; i < 100; i++) {
        EXPECT(cuEventQuery(e), CUDA_SUCCESS);
        EXPECT(cuEventSynchronize(e), CUDA_SUCCESS);
    }
    delay_set(s, flag, 4, LONG_NS);
    CHECK(cuEventRecord(e, s));
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(e));
    REQUIRE(read_u32(flag) == 4, "cuEventSynchronize returned before the long kernel ended");
    EXPECT(cuEventQuery(e), CUDA_SUCCESS);
    t_ok("an event recorded again behind a long kernel: NOT_READY until its synchronisation");

    /* The record alone changes its answer: the kernel went first, the idle answer came
     * after it (the event's last record was behind neither), then only the record. */
    set_u32(flag2, 0);
    delay_set(s2, flag2, 5, LONG_NS);
    EXPECT(cuEventQuery(e), CUDA_SUCCESS);
    EXPECT(cuEventQuery(e), CUDA_SUCCESS);
    CHECK(cuEventRecord(e, s2));
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(e));
    REQUIRE(read_u32(flag2) == 5, "cuEventSynchronize returned before the long kernel ended");
    t_ok("an idle event recorded again on a busy stream, and nothing else: NOT_READY");
    CHECK(cuEventDestroy(e));
}

static void other_stream(CUstream s, CUstream s2, CUdeviceptr flag, CUdeviceptr flag2)
{
    CHECK(cuStreamSynchronize(s));
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(e, s));
    CHECK(cuEventSynchronize(e));
    set_u32(flag2, 0);
    delay_set(s2, flag2, 6, LONG_NS);
    EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT(cuEventQuery(e), CUDA_SUCCESS);
    EXPECT(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
    EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
    EXPECT(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s2));
    REQUIRE(read_u32(flag2) == 6, "the synchronisation returned before the long kernel ended");
    EXPECT(cuStreamQuery(s2), CUDA_SUCCESS);
    t_ok("work on another stream: the idle stream and its event answer idle, the busy one "
         "NOT_READY");

    /* Another stream's synchronisation says nothing of a busy one. */
    set_u32(flag, 0);
    delay_set(s, flag, 7, LONG_NS);
    CHECK(cuStreamSynchronize(s2));
    EXPECT(cuStreamSynchronize(s2), CUDA_SUCCESS);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(read_u32(flag) == 7, "the synchronisation returned before the long kernel ended");
    t_ok("an idle stream's synchronisation: a busy one still NOT_READY");
    CHECK(cuEventDestroy(e));
}

/* A copy that returns complete (into pageable memory, or a synchronous one) is its stream's
 * synchronisation; through the shim it leaves the stream known idle, and work sent after it,
 * on that stream or another, is not. */
static void after_copy(CUstream s, CUstream s2, CUdeviceptr flag, CUdeviceptr flag2)
{
    uint32_t v = 0;
    set_u32(flag, 0);
    delay_set(s, flag, 30, LONG_NS);
    CHECK(cuMemcpyDtoHAsync(&v, flag, 4, s));
    REQUIRE(v == 30, "a copy into pageable memory returned before the kernel ahead of it ended");
    for (int i = 0; i < 100; i++) {
        EXPECT(cuStreamQuery(s), CUDA_SUCCESS);
        EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
    }
    delay_set(s, flag, 31, LONG_NS);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(read_u32(flag) == 31, "the synchronisation returned before the long kernel ended");
    t_ok("after a copy into pageable memory: its stream idle; a kernel after it NOT_READY");

    set_u32(flag2, 0);
    delay_set(s2, flag2, 32, LONG_NS);
    CHECK(cuMemcpyDtoHAsync(&v, flag, 4, s));
    EXPECT(cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s2));
    REQUIRE(read_u32(flag2) == 32, "the synchronisation returned before the long kernel ended");
    t_ok("a copy on one stream: another stream's long kernel still NOT_READY");

    /* The legacy stream, by a synchronous copy, into pageable and into pinned memory. */
    uint32_t *pinned;
    CHECK(cuMemAllocHost((void **)&pinned, 4));
    CUdeviceptr flags[2] = {flag, flag2};
    for (int k = 0; k < 2; k++) {
        uint32_t *to = k ? pinned : &v;
        set_u32(flags[k], 0);
        delay_set(NULL, flags[k], 33 + k, LONG_NS);
        CHECK(cuMemcpyDtoH(to, flags[k], 4));
        REQUIRE(*to == 33u + k, "a synchronous copy returned before the kernel ahead of it ended");
        EXPECT(cuStreamQuery(NULL), CUDA_SUCCESS);
        EXPECT(cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
        delay_set(NULL, flags[k], 35 + k, LONG_NS);
        EXPECT(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
        CHECK(cuStreamSynchronize(NULL));
        REQUIRE(read_u32(flags[k]) == 35u + k,
                "the synchronisation returned before the kernel ended");
    }
    CHECK(cuMemFreeHost(pinned));
    t_ok("after a synchronous copy on the legacy stream (pageable, pinned): idle, then "
         "NOT_READY behind a new kernel");

    /* A copy from device to device completes nothing the caller waits for. */
    delay_set(s, flag, 37, LONG_NS);
    CHECK(cuMemcpyDtoDAsync(flag2, flag, 4, s));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(read_u32(flag2) == 37, "the device copy did not follow the kernel");
    t_ok("an asynchronous device copy behind a long kernel: NOT_READY");
}

/* ------------------------------------------------------------ default streams */

struct pt_arg {
    CUdeviceptr flag;
    int fd_ready[2], fd_go[2]; /* thread -> main: launched; main -> thread: go on */
    char err[200];
};

/* 1 if r is want; else says so in a->err. */
static int want(struct pt_arg *a, CUresult r, CUresult w, const char *what)
{
    if (r == w) return 1;
    snprintf(a->err, sizeof a->err, "%s returned %s, not %s", what, t_errname(r), t_errname(w));
    return 0;
}

/* A second thread's per-thread default stream, busy while the main thread's is idle. */
static void *pt_body(void *p)
{
    struct pt_arg *a = p;
    unsigned value = 9;
    unsigned long long ns = LONG_NS;
    void *args[] = {&a->flag, &value, &ns};
    char c = 'r';
    int ok =
        want(a, cuCtxSetCurrent(g_ctx), CUDA_SUCCESS, "cuCtxSetCurrent") &&
        want(a, cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS,
             "cuStreamQuery(CU_STREAM_PER_THREAD) of an idle stream") &&
        want(a, cuLaunchKernel(f_delay, 1, 1, 1, 32, 1, 1, 0, CU_STREAM_PER_THREAD, args, NULL),
             CUDA_SUCCESS, "cuLaunchKernel") &&
        want(a, cuStreamQuery_ptsz(NULL), CUDA_ERROR_NOT_READY,
             "cuStreamQuery_ptsz(NULL) behind a long kernel");
    t_write_all(a->fd_ready[1], &c, 1); /* a->err says whether it went well */
    if (!ok) return NULL;
    if (!t_read_all(a->fd_go[0], &c, 1)) {
        snprintf(a->err, sizeof a->err, "the main thread went away");
        return NULL;
    }
    (void)(want(a, cuStreamSynchronize_ptsz(NULL), CUDA_SUCCESS,
                "cuStreamSynchronize_ptsz(NULL)") &&
           want(a, cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS,
                "cuStreamQuery(CU_STREAM_PER_THREAD) after its synchronisation"));
    return NULL;
}

static void default_streams(CUdeviceptr flag)
{
    set_u32(flag, 0);
    delay_set(NULL, flag, 8, LONG_NS);
    EXPECT(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    EXPECT(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(NULL));
    REQUIRE(read_u32(flag) == 8, "the synchronisation returned before the long kernel ended");
    for (int i = 0; i < 10; i++) {
        EXPECT(cuStreamQuery(NULL), CUDA_SUCCESS);
        EXPECT(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
        EXPECT(cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
    }
    t_ok("the legacy default stream: NOT_READY behind a long kernel, then idle every time");

    set_u32(flag, 0);
    EXPECT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    delay_set(CU_STREAM_PER_THREAD, flag, 9, LONG_NS);
    EXPECT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    EXPECT(cuStreamQuery_ptsz(NULL), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize_ptsz(NULL));
    REQUIRE(read_u32(flag) == 9, "the synchronisation returned before the long kernel ended");
    for (int i = 0; i < 10; i++) {
        EXPECT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
        EXPECT(cuStreamQuery_ptsz(NULL), CUDA_SUCCESS);
    }
    t_ok("the per-thread default stream: NOT_READY behind a long kernel, then idle every time");

    /* The main thread's per-thread stream is idle and known so; the other thread's is
     * busy: each thread's answer is its own stream's. */
    struct pt_arg a;
    memset(&a, 0, sizeof a);
    CHECK(cuMemAlloc(&a.flag, 4));
    set_u32(a.flag, 0);
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    REQUIRE(pipe(a.fd_ready) == 0 && pipe(a.fd_go) == 0, "pipe: %s", strerror(errno));
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, pt_body, &a) == 0, "pthread_create");
    char c = 'g';
    REQUIRE(t_read_all(a.fd_ready[0], &c, 1), "the other thread went away");
    if (a.err[0]) {
        pthread_join(th, NULL);
        REQUIRE(0, "the other thread: %s", a.err);
    }
    EXPECT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT(cuStreamQuery_ptsz(NULL), CUDA_SUCCESS);
    EXPECT(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    t_write_all(a.fd_go[1], &c, 1);
    pthread_join(th, NULL);
    REQUIRE(!a.err[0], "the other thread: %s", a.err);
    REQUIRE(read_u32(a.flag) == 9, "the other thread's synchronisation returned early");
    CHECK(cuMemFree(a.flag));
    for (int i = 0; i < 2; i++) {
        close(a.fd_ready[i]);
        close(a.fd_go[i]);
    }
    t_ok("two threads' per-thread default streams: the idle one idle, the busy one NOT_READY");
}

/* ------------------------------------------------------------ handles that go */

static void destroyed(CUstream s, CUdeviceptr flag)
{
    for (int round = 0; round < 2; round++) {
        CUstream t;
        CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
        CHECK(cuStreamSynchronize(t));
        EXPECT(cuStreamQuery(t), CUDA_SUCCESS);
        CHECK(cuStreamDestroy(t));
        /* The driver may give the new stream the old one's handle value. */
        CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
        set_u32(flag, 0);
        delay_set(t, flag, 10, LONG_NS);
        EXPECT(cuStreamQuery(t), CUDA_ERROR_NOT_READY);
        CHECK(cuStreamSynchronize(t));
        REQUIRE(read_u32(flag) == 10, "the new stream's synchronisation returned early");
        CHECK(cuStreamDestroy(t));

        CUevent e;
        CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        CHECK(cuEventRecord(e, s));
        CHECK(cuEventSynchronize(e));
        EXPECT(cuEventQuery(e), CUDA_SUCCESS);
        CHECK(cuEventDestroy(e));
        CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        set_u32(flag, 0);
        delay_set(s, flag, 11, LONG_NS);
        CHECK(cuEventRecord(e, s));
        EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
        CHECK(cuEventSynchronize(e));
        REQUIRE(read_u32(flag) == 11, "the new event's synchronisation returned early");
        CHECK(cuEventDestroy(e));
    }
    t_ok("a destroyed stream's or event's idle answer is not a new one's");
}

/* ------------------------------------------------------------ threads at once */

struct poll_arg {
    int index;
    CUdeviceptr flag;
    uint32_t *out; /* pinned word */
    int not_ready; /* NOT_READY answers seen while polling */
    char err[200];
};

#define TRY(call)                                                                                  \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            snprintf(a->err, sizeof a->err, "%s returned %s", #call, t_errname(r_));               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Three rounds on a stream of its own: a long kernel, a query (NOT_READY), polling until
 * idle, then many queries, synchronisations and an event's, all CUDA_SUCCESS. */
static void *poll_body(void *p)
{
    struct poll_arg *a = p;
    CUstream st = NULL;
    CUevent ev = NULL;
    TRY(cuCtxSetCurrent(g_ctx));
    TRY(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    TRY(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    for (unsigned round = 1; round <= 3; round++) {
        unsigned value = 100 * (unsigned)a->index + round;
        unsigned long long ns = LONG_NS;
        void *args[] = {&a->flag, &value, &ns};
        TRY(cuLaunchKernel(f_delay, 1, 1, 1, 32, 1, 1, 0, st, args, NULL));
        TRY(cuEventRecord(ev, st));
        TRY(cuMemcpyDtoHAsync(a->out, a->flag, 4, st));
        CUresult r;
        if ((r = cuStreamQuery(st)) != CUDA_ERROR_NOT_READY) {
            snprintf(a->err, sizeof a->err, "query behind a long kernel returned %s", t_errname(r));
            goto out;
        }
        while ((r = cuStreamQuery(st)) == CUDA_ERROR_NOT_READY) {
            a->not_ready++;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        TRY(r);
        if (*a->out != value) {
            snprintf(a->err, sizeof a->err, "round %u read %u after the stream was idle", round,
                     *a->out);
            goto out;
        }
        for (int i = 0; i < 200; i++) {
            TRY(cuStreamQuery(st));
            TRY(cuEventQuery(ev));
            if (i % 10 == 0) {
                TRY(cuStreamSynchronize(st));
                TRY(cuEventSynchronize(ev));
            }
        }
    }
out:
    if (ev) cuEventDestroy(ev);
    if (st) cuStreamDestroy(st);
    return NULL;
}

static void threads_at_once(void)
{
    struct poll_arg args[NTHREADS];
    pthread_t th[NTHREADS];
    uint32_t *pin;
    CHECK(cuMemAllocHost((void **)&pin, NTHREADS * 64));
    memset(args, 0, sizeof args);
    for (int i = 0; i < NTHREADS; i++) {
        args[i].index = i + 1;
        args[i].out = pin + 16 * i;
        CHECK(cuMemAlloc(&args[i].flag, 4));
    }
    for (int i = 0; i < NTHREADS; i++)
        REQUIRE(pthread_create(&th[i], NULL, poll_body, &args[i]) == 0, "pthread_create");
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        REQUIRE(!args[i].err[0], "thread %d: %s", i + 1, args[i].err);
        REQUIRE(args[i].not_ready > 0, "thread %d never saw NOT_READY while polling", i + 1);
        CHECK(cuMemFree(args[i].flag));
    }
    CHECK(cuMemFreeHost(pin));
    t_ok("%d threads polling streams of their own behind long kernels: every answer right",
         NTHREADS);
}

/* ------------------------------------------------------------ --ipc */

static int to_a[2], to_b[2]; /* pipes: B -> A, A -> B */

/* B: opens A's event; A records it behind a long kernel, then B does. */
static void ipc_opener(void)
{
    setup();
    CUipcEventHandle h;
    REQUIRE(t_read_all(to_b[0], &h, sizeof h), "B: no handle from A");
    CUevent ev;
    CUstream s;
    CUdeviceptr flag;
    CHECK(cuIpcOpenEventHandle(&ev, h));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&flag, 4));
    set_u32(flag, 0);
    CHECK(cuEventSynchronize(ev));
    for (int i = 0; i < 100; i++)
        EXPECT(cuEventQuery(ev), CUDA_SUCCESS);
    t_say(to_a[1], 'q');
    t_hear(to_b[0], 'r', "B"); /* A recorded it behind a long kernel; B sent nothing since */
    EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(ev));
    EXPECT(cuEventQuery(ev), CUDA_SUCCESS);
    t_say(to_a[1], 'o');
    t_hear(to_b[0], 'q', "B"); /* A found it complete again */
    delay_set(s, flag, 21, LONG_NS);
    CHECK(cuEventRecord(ev, s));
    t_say(to_a[1], 'r');
    t_hear(to_b[0], 'd', "B");
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(flag));
    exit(0);
}

static void ipc_owner(pid_t b)
{
    setup();
    CUevent ev;
    CUstream s;
    CUdeviceptr flag;
    CHECK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&flag, 4));
    set_u32(flag, 0);
    CHECK(cuEventRecord(ev, s));
    CHECK(cuEventSynchronize(ev));
    CUipcEventHandle h;
    CHECK(cuIpcGetEventHandle(&h, ev));
    t_write_all(to_b[1], &h, sizeof h);
    t_hear(to_a[0], 'q', "A");
    delay_set(s, flag, 20, LONG_NS);
    CHECK(cuEventRecord(ev, s));
    t_say(to_b[1], 'r');
    t_hear(to_a[0], 'o', "A");
    t_ok("the owner records an interprocess event again: NOT_READY for the opener");
    CHECK(cuEventSynchronize(ev));
    for (int i = 0; i < 100; i++)
        EXPECT(cuEventQuery(ev), CUDA_SUCCESS);
    t_say(to_b[1], 'q');
    t_hear(to_a[0], 'r', "A"); /* B recorded it behind a long kernel; A sent nothing since */
    EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(ev));
    EXPECT(cuEventQuery(ev), CUDA_SUCCESS);
    t_ok("the opener records it again: NOT_READY for the owner");
    t_say(to_b[1], 'd');
    int st = 0;
    REQUIRE(waitpid(b, &st, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "B failed (status %d)", st);
    REQUIRE(read_u32(flag) == 20, "A's kernel did not store its value");
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(flag));
    t_pass();
}

static void ipc_mode(void)
{
    REQUIRE(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        close(to_a[0]);
        close(to_b[1]);
        ipc_opener();
    }
    close(to_a[1]);
    close(to_b[0]);
    ipc_owner(b);
}

/* ------------------------------------------------------------ --deferred */

static void deferred_mode(void)
{
    int n = 0;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("one device");
    CUdevice d0, d1;
    CUcontext c0, c1;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDeviceGet(&d1, 1));
    CHECK(cuDevicePrimaryCtxRetain(&c1, d1));
    CHECK(cuCtxSetCurrent(c1));
    CUstream s1;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuDevicePrimaryCtxRetain(&c0, d0));
    CHECK(cuCtxSetCurrent(c0));
    CUstream s0;
    CUevent e0;
    CHECK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e0, CU_EVENT_DISABLE_TIMING));

    /* After a query found the stream idle. */
    CHECK(cuStreamSynchronize(s0));
    EXPECT(cuStreamQuery(s0), CUDA_SUCCESS);
    CUresult r = cuEventRecord(e0, s1);
    if (r != CUDA_SUCCESS)
        t_skip("the record was refused at once (%s): nothing deferred", t_errname(r));
    EXPECT(cuStreamQuery(s0), CUDA_SUCCESS); /* a query does not report it */
    EXPECT(cuStreamQuery(s0), CUDA_SUCCESS);
    /* The driver's error for the record (the CPU test driver's: CUDA_ERROR_INVALID_HANDLE). */
    r = cuStreamSynchronize(s0);
    REQUIRE(r != CUDA_SUCCESS, "the synchronisation did not report the deferred error");
    EXPECT(cuStreamSynchronize(s0), CUDA_SUCCESS);
    EXPECT(cuStreamSynchronize(s0), CUDA_SUCCESS);
    t_ok("an error deferred behind an idle query: reported by the next synchronisation");

    /* After a synchronisation found everything idle. */
    CHECK(cuCtxSynchronize());
    EXPECT(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT(cuEventRecord(e0, s1), CUDA_SUCCESS);
    EXPECT_ERR(cuCtxSynchronize());
    EXPECT(cuCtxSynchronize(), CUDA_SUCCESS);
    t_ok("an error deferred after an idle synchronisation: reported by the next one");

    /* After a copy into pageable memory found the stream idle; and by such a copy. */
    CUdeviceptr m;
    uint32_t v = 0;
    CHECK(cuMemAlloc(&m, 4));
    CHECK(cuMemcpyDtoHAsync(&v, m, 4, s0));
    EXPECT(cuStreamSynchronize(s0), CUDA_SUCCESS);
    EXPECT(cuEventRecord(e0, s1), CUDA_SUCCESS);
    EXPECT_ERR(cuStreamSynchronize(s0));
    EXPECT(cuStreamSynchronize(s0), CUDA_SUCCESS);
    EXPECT(cuEventRecord(e0, s1), CUDA_SUCCESS);
    EXPECT_ERR(cuMemcpyDtoHAsync(&v, m, 4, s0));
    EXPECT(cuStreamSynchronize(s0), CUDA_SUCCESS);
    CHECK(cuMemFree(m));
    t_ok("an error deferred after a copy into pageable memory: reported by the next "
         "synchronisation, or by such a copy");

    CHECK(cuEventDestroy(e0));
    CHECK(cuStreamDestroy(s0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuDevicePrimaryCtxRelease(d0));
    CHECK(cuDevicePrimaryCtxRelease(d1));
    t_pass();
}

/* ------------------------------------------------------------ --hold */

static void wait_file(const char *path)
{
    for (int i = 0; i < 6000 && access(path, F_OK) != 0; i++) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    REQUIRE(access(path, F_OK) == 0, "no %s within 60 s", path);
}

static void hold_mode(const char *go1, const char *go2)
{
    setup();
    CUstream s;
    CUevent e;
    CUdeviceptr flag;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemAlloc(&flag, 4));
    delay_set(s, flag, 1, 1 * MS);
    CHECK(cuEventRecord(e, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventSynchronize(e));
    CHECK(cuCtxSynchronize());
    CHECK(cuStreamQuery(s));
    CHECK(cuEventQuery(e));
    printf("ready\n");
    fflush(stdout);
    wait_file(go1);
    for (int i = 0; i < 1000; i++) {
        CHECK(cuStreamQuery(s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuEventQuery(e));
        CHECK(cuEventSynchronize(e));
        CHECK(cuCtxSynchronize());
    }
    printf("queried\n");
    fflush(stdout);
    wait_file(go2);
    printf("after: cuStreamQuery %s\n", t_errname(cuStreamQuery(s)));
    printf("after: cuStreamSynchronize %s\n", t_errname(cuStreamSynchronize(s)));
    printf("after: cuEventQuery %s\n", t_errname(cuEventQuery(e)));
    printf("after: cuEventSynchronize %s\n", t_errname(cuEventSynchronize(e)));
    printf("after: cuCtxSynchronize %s\n", t_errname(cuCtxSynchronize()));
    exit(0);
}

/* --copy GO1 GO2: a copy into pageable memory makes its stream's answers known; after GO1
 * they are asked 1000 times each (tests/idle.sh: the server must see none of them); the
 * process stays until GO2, for the script to count. */
static void copy_hold_mode(const char *go1, const char *go2)
{
    setup();
    CUstream s;
    CUdeviceptr flag;
    uint32_t v = 0;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&flag, 4));
    delay_set(s, flag, 1, 1 * MS);
    CHECK(cuMemcpyDtoHAsync(&v, flag, 4, s));
    REQUIRE(v == 1, "the copy returned before the kernel ahead of it ended");
    printf("ready\n");
    fflush(stdout);
    wait_file(go1);
    for (int i = 0; i < 1000; i++) {
        CHECK(cuStreamSynchronize(s));
        CHECK(cuStreamQuery(s));
    }
    printf("queried\n");
    fflush(stdout);
    wait_file(go2);
    exit(0);
}

int main(int argc, char **argv)
{
    t_init("idle_answers", 120);
    if (t_has_flag(argc, argv, "--ipc")) ipc_mode();
    if (t_has_flag(argc, argv, "--deferred")) deferred_mode();
    if (argc == 4 && strcmp(argv[1], "--hold") == 0) hold_mode(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "--copy") == 0) copy_hold_mode(argv[2], argv[3]);
    setup();
    CUstream s, s2;
    CUdeviceptr flag, flag2;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&flag, 4));
    CHECK(cuMemAlloc(&flag2, 4));
    t_ok("setup");

    after_sync(s, flag);
    new_launch(s, flag);
    ctx_sync(s, s2, flag, flag2);
    events(s, s2, flag, flag2);
    other_stream(s, s2, flag, flag2);
    after_copy(s, s2, flag, flag2);
    default_streams(flag);
    destroyed(s, flag);
    threads_at_once();

    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuMemFree(flag));
    CHECK(cuMemFree(flag2));
    t_pass();
}
