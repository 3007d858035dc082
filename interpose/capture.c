/* Stream capture modes, kept in the client. The server captures in relaxed mode whatever
 * the client asked for (server/graphs/graph.c says why), so what a mode forbids is forbidden here,
 * per process as the driver does: a thread not in relaxed mode may make no "potentially
 * unsafe" call (allocations, frees, event queries) while it has a capture of its own that
 * is not relaxed, nor, in global mode, while another thread has a global capture. The call
 * fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the captures in its way are
 * invalidated: their end fails, and the graph they built goes. */
#include "interpose/shim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct capture {
    CUstream stream; /* the stream that began it (ends it) */
    cuuint64_t id;   /* the driver's capture id, 0 if it could not be read */
    CUstreamCaptureMode mode;
    pthread_t thread; /* that began it */
    int invalid;
    struct capture *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct capture *captures; /* in progress, begun by this process */
/* How many: read without the lock by calls that have nothing to check when it is 0. */
static atomic_uint ncaptures;

/* The calling thread's mode (cuThreadExchangeStreamCaptureMode). */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult SHIM_IMPL(cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode)
{
    if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult shim_capture_unsafe(void)
{
    CUresult r = CUDA_SUCCESS;
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED ||
        !atomic_load_explicit(&ncaptures, memory_order_relaxed))
        return r;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&lock);
    for (struct capture *c = captures; c; c = c->next) {
        int mine = pthread_equal(c->thread, self);
        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
             c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            c->invalid = 1;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult shim_capture_refuse(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (!atomic_load_explicit(&ncaptures, memory_order_relaxed) ||
        cuStreamGetCaptureInfo(s, &st, &id) != CUDA_SUCCESS || st == CU_STREAM_CAPTURE_STATUS_NONE)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    for (struct capture *c = captures; c; c = c->next)
        if (c->id == id) c->invalid = 1;
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

int shim_capture_any(void)
{
    return atomic_load_explicit(&ncaptures, memory_order_relaxed) != 0;
}

int shim_capture_active(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return atomic_load_explicit(&ncaptures, memory_order_relaxed) &&
           cuStreamIsCapturing(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

int shim_work_captured(CUstream s)
{
    return s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && shim_capture_active(s);
}

/* The capture `s` began, unlinked; NULL if none. */
static struct capture *take(CUstream s)
{
    pthread_mutex_lock(&lock);
    struct capture **p = &captures, *c;
    while ((c = *p) && c->stream != s)
        p = &c->next;
    if (c) {
        *p = c->next;
        atomic_fetch_sub_explicit(&ncaptures, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    return c;
}

void shim_capture_stream_gone(CUstream s)
{
    if (atomic_load_explicit(&ncaptures, memory_order_relaxed)) free(take(s));
}

/* A capture begun. Not kept (its mode then not enforced, the capture itself works): out
 * of memory, or the NULL stream of a _ptsz call (the thread's own stream, which the end's
 * replay below could not name). */
static void begun(CUstream s, CUstreamCaptureMode mode)
{
    struct capture *c = s ? malloc(sizeof(*c)) : NULL;
    if (!c) return;
    *c = (struct capture){.stream = s, .mode = mode, .thread = pthread_self()};
    CUstreamCaptureStatus st;
    if (cuStreamGetCaptureInfo(s, &st, &c->id) != CUDA_SUCCESS) c->id = 0;
    free(take(s)); /* a record left by a stream that went */
    pthread_mutex_lock(&lock);
    c->next = captures;
    captures = c;
    atomic_fetch_add_explicit(&ncaptures, 1, memory_order_relaxed);
    pthread_mutex_unlock(&lock);
}

/* cuStreamBeginCapture (the first version: global mode), _v2 and ToGraph: the mode is the
 * second and the sixth argument. */
static void begin_v1_after(const void *const *argv)
{
    begun(*(const CUstream *)argv[0], CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static void begin_after(const void *const *argv)
{
    begun(*(const CUstream *)argv[0], *(const CUstreamCaptureMode *)argv[1]);
}

static void to_graph_after(const void *const *argv)
{
    begun(*(const CUstream *)argv[0], *(const CUstreamCaptureMode *)argv[5]);
}

static CUresult mode_ok(const void *const *argv, int i)
{
    return *(const CUstreamCaptureMode *)argv[i] <= CU_STREAM_CAPTURE_MODE_RELAXED
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

static CUresult begin_before(const void *const *argv)
{
    return mode_ok(argv, 1);
}

static CUresult to_graph_before(const void *const *argv)
{
    return mode_ok(argv, 5);
}

const struct shim_hook shim_hook_capture_begin_v1 = {.after = begin_v1_after};
const struct shim_hook shim_hook_capture_begin = {.before = begin_before, .after = begin_after};
const struct shim_hook shim_hook_capture_to_graph = {.before = to_graph_before,
                                                     .after = to_graph_after};

/* The end of a capture an unsafe call invalidated: the server's capture ends (this hook
 * sends the call itself, with the record gone), its graph is destroyed, and the caller
 * gets the driver's error for an invalidated capture. */
static CUresult end_before(const void *const *argv)
{
    CUstream s = *(const CUstream *)argv[0];
    CUgraph *out = *(CUgraph *const *)argv[1];
    if (out) *out = NULL; /* what a failed end leaves, as with the driver */
    struct capture *c = take(s);
    int invalid = c && c->invalid;
    free(c);
    if (!invalid) return CUDA_SUCCESS;
    CUgraph g = NULL;
    /* Ended in the server too, through the entry point: this hook, asked again, finds the
     * capture taken and lets the call through. */
    if (cuStreamEndCapture(s, &g) == CUDA_SUCCESS && g) cuGraphDestroy(g);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
}

const struct shim_hook shim_hook_capture_end = {.before = end_before};

static CUresult unsafe_before(const void *const *argv)
{
    (void)argv;
    return shim_capture_unsafe();
}

const struct shim_hook shim_hook_capture_unsafe = {.before = unsafe_before};
