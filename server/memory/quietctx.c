/* The quiet context: a context of the server's own, on one of its devices, in which a departed
 * client's host memory is unregistered (its segment, its pinned allocations and registrations,
 * its staging blocks, its managed memory's host views), so that its leaving neither waits for
 * the other clients' work nor holds their launches.
 *
 * Why: cuMemHostUnregister waits for every stream of the context current on the calling thread,
 * and while it waits the driver holds launches into that context on any other stream (H200,
 * driver 580.159.04, `tools/heldwait unregister --spin --launch`: a launch of a function loaded
 * before waited for as long as another stream's kernel ran; cuMemFree, cuMemFreeHost and a
 * module load held it so too). In the one shared context that was every client's work: a
 * client that left while another's kernel waited for that other's next launch (a collective's
 * half waiting for its peer; `tests/progs/thread_peer`) held that launch until the kernel
 * gave up (`tests/leave_beside.sh`), and by the same probe any client that left held every
 * other's launches until the work queued before its unregistration had run. Made with another
 * context current, the same unregistration of a portable registration neither waited nor held the
 * launch (`heldwait unregister --spin
 * --launch --other`, same H200): the driver waits for the current context's streams only, and
 * this one never has any.
 *
 * What the driver then no longer checks, the server must: that no work still touches the
 * range. A departed client's release has drained all its work first (registry.c: its streams,
 * its families' streams), so only ranges of a client whose release drained (c->drained) come
 * here, and only while no other connection of the same process is served (it could have work
 * reading the range: srv_client_pid_shared). Everything else is unregistered as before, in
 * the shared context, gated (codegate.c). Registrations stay where they are made: a portable
 * registration is every context's, and the quiet context never registers anything, so it can
 * be destroyed at any time without taking memory with it.
 *
 * Cost: a context's device memory (bench/NOTES.md, "The quiet context": 264 MiB in a probe
 * of its own on an H200, its limits set to their least; the device's memory in use rose by
 * 37 MB in the server with it made) and up to a second to make. So it is made at the first
 * such unregistration, which the departing client's release waits for, and destroyed once
 * no client is left (the GPU tier's rows that watch the device's memory come back see it
 * gone). Not sooner: whether cuCtxDestroy waits for the device's work, which other clients'
 * running kernels would then make the main loop do, was not probed; nor while work a release
 * left running may still run (srv.left_running_any). MPSSHIM_QUIET_CONTEXT=0: never made (the
 * unregistrations stay in the shared context, as before). */
#include "server/memory/quietctx.h"
#include "server/core/devctx.h"
#include "server/core/log.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext quiet;
static int said; /* its making failed (logged once; tried again at the next need) */

/* The context made on the first device whose shared context is (a registration is every
 * context's: any device will do, and one the server uses anyway costs no device more), its
 * limits at their least (nothing ever runs in it). */
static CUresult make(void)
{
    CUdevice dev;
    int d = 0;
    while (d < srv.ndev && d < CHAN_MAX_DEVICES && !srv_device_made(d))
        d++;
    if (d >= srv.ndev || d >= CHAN_MAX_DEVICES) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = DRV(cuDeviceGet)(&dev, d);
    if (r == CUDA_SUCCESS) r = DRV(cuCtxCreate_v4)(&quiet, NULL, 0, dev);
    if (r != CUDA_SUCCESS) {
        quiet = NULL;
        if (!said) {
            said = 1;
            srv_log("The quiet context for departed clients' host memory could not be made (%s): "
                    "their unregistrations wait in the shared context (server/memory/quietctx.c)",
                    srv_errname(r));
        }
        return r;
    }
    /* Made current by its making: the stack reservation is most of its memory. */
    (void)DRV(cuCtxSetLimit)(CU_LIMIT_STACK_SIZE, 16);
    (void)DRV(cuCtxSetLimit)(CU_LIMIT_PRINTF_FIFO_SIZE, 4096);
    (void)DRV(cuCtxSetLimit)(CU_LIMIT_MALLOC_HEAP_SIZE, 4096);
    CUcontext popped;
    (void)DRV(cuCtxPopCurrent_v2)(&popped);
    srv_log("Quiet context made for departed clients' host memory (goes when no client is left)");
    return CUDA_SUCCESS;
}

int srv_quiet_unregister(void *p, CUresult *res)
{
    if (!srv.quiet_context) return 0;
    pthread_mutex_lock(&lock);
    int done = 0;
    if ((quiet || make() == CUDA_SUCCESS) && DRV(cuCtxPushCurrent_v2)(quiet) == CUDA_SUCCESS) {
        *res = DRV(cuMemHostUnregister)(p);
        CUcontext popped;
        (void)DRV(cuCtxPopCurrent_v2)(&popped);
        done = 1;
    }
    pthread_mutex_unlock(&lock);
    return done;
}

static void destroy(void)
{
    if (quiet) (void)DRV(cuCtxDestroy_v2)(quiet);
    quiet = NULL;
}

void srv_quiet_idle(void)
{
    if (atomic_load(&srv.left_running_any)) return;
    pthread_mutex_lock(&lock);
    destroy();
    pthread_mutex_unlock(&lock);
}

void srv_quiet_release(void)
{
    pthread_mutex_lock(&lock);
    destroy();
    pthread_mutex_unlock(&lock);
}
