/* A context's synchronisation and limits: the context calls that the server answers
 * (cuCtxSynchronize, cuCtxGetLimit, cuCtxSetLimit). The client's table of contexts, and
 * the calls it answers from that table, are context.c's. */
#include "interpose/shim.h"
#include "channel/procstat.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* The client's streams of context `id` (0: the current one), answered here when they are
 * known to be idle (idle.c). */
static CUresult ctx_sync(uint32_t id)
{
    struct shim_idle q;
    if (shim_idle_ctx(&q, id ? id : shim_current_ctx_id())) return CUDA_SUCCESS;
    uint64_t gen = shim_mvar_sync_begin();
    CUresult r = shim_ask(CHAN_OP_CTX_SYNC, &id, id ? sizeof(id) : 0);
    /* The device's writes to __managed__ variables come back first (mvars.c). */
    shim_mvar_synced(SHIM_MVAR_CTX, NULL, id ? id : shim_current_ctx_id(), gen, &r);
    if (r == CUDA_SUCCESS) shim_idle_keep(&q, 1);
    return r;
}

CUresult SHIM_IMPL(cuCtxSynchronize)(void)
{
    CUresult r = shim_ready();
    if (r == CUDA_SUCCESS) r = shim_need_ctx();
    if (r != CUDA_SUCCESS) return r;
    return ctx_sync(0);
}

CUresult SHIM_IMPL(cuCtxSynchronize_v2)(CUcontext ctx)
{
    if (!ctx) return cuCtxSynchronize();
    uint32_t id;
    CUresult r = shim_ctx_lookup(ctx, &id, NULL);
    if (r != CUDA_SUCCESS) return r;
    return ctx_sync(id);
}

/* This process's threads (field 20 of /proc/self/stat); 0 when that cannot be read. The file
 * is kept open (a read, no open, per free), opened again in a child after a fork, whose
 * /proc/self is another process's. */
static long process_threads(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int fd = -1;
    static pid_t owner;
    pthread_mutex_lock(&lock);
    pid_t me = getpid();
    if (fd < 0 || owner != me) {
        if (fd >= 0) close(fd);
        fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        owner = me;
    }
    long long n = chan_stat_read(fd, 20);
    pthread_mutex_unlock(&lock);
    return n > 0 ? (long)n : 0;
}

/* cuMemFree waits, in the server, for this process's work there before it frees, as a native one
 * waits for the context's work; and the server thread that waits serves every thread of the
 * process. Where the process has other threads, one of them may be the one to end that work (a
 * kernel waiting for a flag another thread's launch stores: a collective's half,
 * tests/progs/thread_peer free), whose launch would then stay unread behind the free for as long
 * as the kernel waits: for ever in a collective. So the contexts whose work the free waits for
 * (those of the server it goes to) are synchronised here first, a synchronisation the server polls
 * between the other threads' calls (waits.c); the free then finds only work queued since. A
 * process of one thread skips it: nothing else can be sent meanwhile, and the server's own wait
 * costs no round trip. Not while a capture is going (a synchronisation would end it). An error the
 * synchronisation returns (a fault, an error of earlier asynchronous work) is the free's, as a
 * native cuMemFree may return one; the memory stays allocated then. Natively a GPU's driver holds
 * the other thread's launch behind the free too (H200, driver 580.159.04: thread_peer free gives
 * up after 5 s without the shim); what this costs is one round trip where the free would have
 * waited for work anyway, since a context known idle (idle.c) is not asked. Still waited in the
 * server: work on another context of the same server that waits on this thread (a kernel on GPU 0
 * waiting for this thread's launch on GPU 1 after the free), which a native free on GPU 1 would
 * not wait for (docs/differences.md). */
CUresult shim_ctx_settle_before_free(void)
{
    if (shim_capture_any() || process_threads() == 1) return CUDA_SUCCESS;
    struct shim_conn *conn = shim_route_conn();
    uint32_t ids[64];
    size_t n = shim_ctx_active_ids(ids, 64); /* past 64, the server's own wait covers them */
    for (size_t i = 0; i < n && i < 64; i++) {
        int dev = shim_ctx_id_device(ids[i]);
        if (shim_conn_of_device(dev) != conn) continue;
        struct shim_route saved;
        shim_route_begin(&saved, dev, ids[i]);
        CUresult r = ctx_sync(ids[i]);
        shim_route_end(&saved);
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

static CUresult limit_call(struct chan_limit *m)
{
    CUresult r = shim_ready();
    if (r == CUDA_SUCCESS) r = shim_need_ctx();
    if (r != CUDA_SUCCESS) return r;
    return shim_rpc(CHAN_OP_CTX_LIMIT, m, sizeof(*m), &m->value, sizeof(m->value), NULL);
}

CUresult SHIM_IMPL(cuCtxGetLimit)(size_t *pvalue, CUlimit limit)
{
    if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
    struct chan_limit m = {.set = 0, .limit = (uint32_t)limit};
    CUresult r = limit_call(&m);
    if (r == CUDA_SUCCESS) *pvalue = (size_t)m.value;
    return r;
}

CUresult SHIM_IMPL(cuCtxSetLimit)(CUlimit limit, size_t value)
{
    struct chan_limit m = {.set = 1, .limit = (uint32_t)limit, .value = value};
    /* Setting a limit waits for every stream of the context (hostfn.c). */
    shim_hostfn_settle(shim_current_device());
    return limit_call(&m);
}
