/* Library unloads: a client's library whose code was loaded in a shared context is not
 * unloaded while other clients' work may run; it is kept, and unloaded once no client is
 * left (or when the server's image ends: its fresh start when idle, server/handover/
 * recycle.c, or its exit).
 *
 * Why: cuLibraryUnload of a library one of whose kernels is loaded in a context waits for
 * every stream of that context, and while it waits the driver holds launches into the context
 * on any other stream (an H200, driver 580.159.04, 2026-11-30: `tools/heldwait libunload
 * --spin --launch`; with another context current, the same: `--other`). In the one shared
 * context a client's unload, at its exit (cudart unloads its libraries then) or its release
 * after it left, so held every other client's launches until the work queued before it had
 * run, and a kernel waiting for its own process's next launch (a collective's half waiting
 * for its peer) until it gave up. A library none of whose kernels was ever loaded in a
 * context waited for nothing and held nothing (`libunload-cold`), and cuModuleUnload of a
 * module, loaded code and all, waited without holding the launch (`unload`): those are
 * unloaded at once, as before.
 *
 * Only while another client is served: alone, a client's unload holds up nobody, and a
 * program that loads and unloads code for as long as it runs (a JIT) keeps nothing.
 * What is kept: the library's code and globals in device memory, its image in the server's
 * memory (the GPU tier, 2026-11-30: at most 17 at once, a PyTorch client's). The client's record
 * goes, so the handle is no client's any more. That memory is charged to no client any more,
 * and a library's globals may be large: so at most PER_PROCESS of one process are kept (past
 * that its unloads are made at once, said once per image), and at most KEEP_MAX in all (past
 * that the oldest is unloaded at once, said once per image); either waits and holds as before.
 * Which libraries count as loaded is the server's own record (srv_library_hot: an eager load, a
 * kernel's load through the code gate, a call that may load code); a driver call that loads code
 * outside those (none known) would make an unload that waits. MPSSHIM_KEEP_LIBRARIES=0: every
 * library is unloaded when its client asks or leaves. */
#include "server/code/unloads.h"
#include "server/core/clients.h"
#include "server/core/log.h"

#include <pthread.h>
#include <string.h>

#define KEEP_MAX 1024  /* libraries kept */
#define PER_PROCESS 32 /* of them, one process's */
#define LIB_HOT (1ull) /* a CUlibrary record's aux: its code may be loaded in a context */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUlibrary lib;
    pid_t pid; /* whose it was (0: a process the server cannot see into: all such together) */
} kept[KEEP_MAX];
static unsigned nkept;
static int said_all, said_one; /* under lock */

void srv_library_hot(struct srv_obj *o)
{
    if (o && o->key.type == SHIM_HT_CUkernel) o = o->parent;
    if (o && o->key.type == SHIM_HT_CUlibrary) o->aux |= LIB_HOT;
}

static void unload(CUlibrary lib)
{
    CUresult r = DRV(cuLibraryUnload)(lib);
    if (r != CUDA_SUCCESS)
        srv_log("Unloading a library a client let go of failed with %s", srv_errname(r));
}

CUresult srv_library_unload(struct srv_client *c, struct srv_obj *o)
{
    CUlibrary lib = (CUlibrary)(uintptr_t)o->key.value;
    /* The caller's client is one of those counted (served, or being released). */
    if (!(o->aux & LIB_HOT) || !srv.keep_libraries || srv_clients_live() <= 1)
        return DRV(cuLibraryUnload)(lib);
    CUlibrary oldest = NULL;
    unsigned mine = 0;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < nkept; i++)
        mine += kept[i].pid == c->pid;
    if (mine >= PER_PROCESS) {
        int said = said_one++;
        pthread_mutex_unlock(&lock);
        if (!said)
            srv_log("Client process %d: %d of its libraries whose code ran are kept; the next "
                    "is unloaded at once, which waits for every client's work and holds their "
                    "launches meanwhile (server/code/unloads.c; said once)",
                    (int)c->pid, PER_PROCESS);
        return DRV(cuLibraryUnload)(lib);
    }
    if (nkept == KEEP_MAX) {
        oldest = kept[0].lib;
        memmove(kept, kept + 1, (KEEP_MAX - 1) * sizeof(kept[0]));
        nkept--;
        if (!said_all++)
            srv_log("%d libraries whose code ran are kept; the oldest is unloaded now, which "
                    "waits for every client's work and holds their launches meanwhile "
                    "(server/code/unloads.c; said once)",
                    KEEP_MAX);
    }
    kept[nkept].lib = lib;
    kept[nkept++].pid = c->pid;
    pthread_mutex_unlock(&lock);
    if (oldest) unload(oldest);
    return CUDA_SUCCESS;
}

void srv_unloads_idle(void)
{
    /* Work a release left running may never end: an unload would wait for it for ever. */
    if (atomic_load(&srv.left_running_any)) return;
    CUlibrary all[KEEP_MAX];
    pthread_mutex_lock(&lock);
    unsigned n = nkept;
    for (unsigned i = 0; i < n; i++)
        all[i] = kept[i].lib;
    nkept = 0;
    pthread_mutex_unlock(&lock);
    for (unsigned i = 0; i < n; i++)
        unload(all[i]);
    if (n)
        srv_log("Unloaded %u libraries kept from clients that let go of them (no client left)", n);
}
