/* SM shares: a throttled client's streams are made in a green context holding its share of
 * a device's SMs. Memory, modules and events stay in the device's shared context: a
 * function loaded there runs on a green context's stream, and events cross between them
 * (a green context's stream runs a kernel on exactly its partition's SMs: bench/NOTES.md,
 * "Green contexts").
 *
 * For a share of S SMs the device is split into floor(total / S) disjoint partitions, made
 * when the first client with that share arrives; each client takes the partition with the
 * fewest users, so two 50% clients run side by side on the two halves and more clients
 * than partitions share them. Partitions of different shares may overlap, as MPS's limits
 * do (they cap what a client may use, they reserve nothing). A set is destroyed when its
 * last client leaves.
 *
 * MPSSHIM_GREEN_EACH=1 (an experiment, off by default) gives every unthrottled client a
 * green context of its own over all the SMs, for its streams: whether the driver then
 * serves the clients' launches side by side rather than through the one context, whose
 * threads together launch at a ceiling however many they are. Its one-process form
 * (`onectx --green`) lifted that ceiling by 4-9% at most (bench/README.md, "One context's
 * ceiling"), so it stays off; this server form has not itself been measured on a GPU. */
#include "server/core/server.h"
#include "server/limits/account.h" /* struct srv_account */
#include "server/core/fault.h"
#include "server/core/devctx.h"
#include "server/limits/green.h"
#include "server/limits/policy.h"

#include <stdlib.h>
#include <string.h>

/* A client's green contexts (its green), per device: its partition's, where its streams
 * are made (NULL: the shared context); with MPSSHIM_GREEN_EACH=1, an unthrottled client's
 * own over all SMs, where its streams are made instead (NULL otherwise). */
struct srv_green {
    CUgreenCtx part[CHAN_MAX_DEVICES];
    CUgreenCtx own[CHAN_MAX_DEVICES];
    uint64_t given; /* bit d: device d's share was given (its context made: devctx.c) */
};

#define GREEN_MAX_PARTS 64

struct green_set {
    struct green_set *next;
    int dev;
    unsigned sms;
    unsigned nparts;
    unsigned users[GREEN_MAX_PARTS];
    CUgreenCtx ctx[GREEN_MAX_PARTS];
};

/* Guarded by green_lock. */
static pthread_mutex_t green_lock = PTHREAD_MUTEX_INITIALIZER;
static struct green_set *sets;

void srv_green_init(void)
{
    for (int d = 0; d < srv.ndev; d++) {
        struct srv_sm_info *in = &srv_sm[d];
        CUdevResource r;
        memset(&r, 0, sizeof(r));
        in->total = (unsigned)srv.devinfo.dev[d].attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
        if (DRV(cuDeviceGetDevResource)(d, &r, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
            r.sm.smCount > 0) {
            in->total = r.sm.smCount;
            in->align = r.sm.smCoscheduledAlignment ? r.sm.smCoscheduledAlignment : 1;
            in->min = r.sm.minSmPartitionSize ? r.sm.minSmPartitionSize : in->align;
        } else {
            in->align = 0; /* no green contexts here: shares cannot be enforced */
            srv_log("Device %d has no SM partitions (green contexts); active thread "
                    "percentages are not enforced there",
                    d);
        }
    }
}

/* Makes the partitions of `sms` SMs on dev; NULL on failure (logged). */
static struct green_set *make_set(int dev, unsigned sms)
{
    struct green_set *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->dev = dev;
    g->sms = sms;
    CUdevResource all, rest, parts[GREEN_MAX_PARTS];
    unsigned n = srv_sm[dev].total / sms;
    if (n > GREEN_MAX_PARTS) n = GREEN_MAX_PARTS;
    if (n == 0) n = 1;
    CUresult r = DRV(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r == CUDA_SUCCESS) r = DRV(cuDevSmResourceSplitByCount)(parts, &n, &all, &rest, 0, sms);
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        CUdevResourceDesc desc;
        r = DRV(cuDevResourceGenerateDesc)(&desc, &parts[i], 1);
        if (r == CUDA_SUCCESS)
            r = DRV(cuGreenCtxCreate)(&g->ctx[i], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
        if (r == CUDA_SUCCESS) g->nparts = i + 1;
    }
    if (r != CUDA_SUCCESS) {
        srv_log("Cannot partition device %d into %u-SM green contexts: %s", dev, sms,
                srv_errname(r));
        for (unsigned i = 0; i < g->nparts; i++)
            DRV(cuGreenCtxDestroy)(g->ctx[i]);
        free(g);
        return NULL;
    }
    srv_log("Device %d: %u green context(s) of %u SMs for clients with that share", dev, g->nparts,
            sms);
    return g;
}

/* MPSSHIM_GREEN_EACH: c's own green context over all of dev's SMs, or NULL (said once). */
static CUgreenCtx own_green(struct srv_client *c, int dev)
{
    static _Atomic int said;
    CUdevResource all;
    CUdevResourceDesc desc;
    CUgreenCtx g = NULL;
    CUresult r = DRV(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r == CUDA_SUCCESS) r = DRV(cuDevResourceGenerateDesc)(&desc, &all, 1);
    if (r == CUDA_SUCCESS) r = DRV(cuGreenCtxCreate)(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS && !atomic_exchange(&said, 1))
        srv_log("Client process %d: no green context of its own on device %d (%s): its "
                "streams are made in the shared context (MPSSHIM_GREEN_EACH)",
                (int)c->pid, dev, srv_errname(r));
    return r == CUDA_SUCCESS ? g : NULL;
}

/* Under green_lock: c's partition of device d where its share is below the whole (and its
 * own green context there with MPSSHIM_GREEN_EACH). 0, or -1 if partitions cannot be made. */
static int assign_one(struct srv_client *c, int d)
{
    if (srv.green_each && srv_sm[d].align && c->lim->sms[d] >= srv_sm[d].total)
        c->green->own[d] = own_green(c, d);
    if (!srv_sm[d].align || c->lim->sms[d] >= srv_sm[d].total) {
        c->green->given |= 1ull << d;
        return 0;
    }
    struct green_set *g = sets;
    while (g && !(g->dev == d && g->sms == c->lim->sms[d]))
        g = g->next;
    if (!g && (g = make_set(d, c->lim->sms[d]))) {
        g->next = sets;
        sets = g;
    }
    if (!g) return -1;
    /* One partition per process: its further connections take its first's, so that
     * connections do not add up to more than its share (account.c). */
    unsigned best = 0;
    int mine = c->acct ? c->acct->part[d] : -1;
    if (mine >= 0 && (unsigned)mine < g->nparts) {
        best = (unsigned)mine;
    } else {
        for (unsigned i = 1; i < g->nparts; i++)
            if (g->users[i] < g->users[best]) best = i;
        if (c->acct) c->acct->part[d] = (int)best;
    }
    g->users[best]++;
    c->lim->part[d] = (int)best;
    c->green->part[d] = g->ctx[best];
    c->green->given |= 1ull << d; /* not before: a partition not had is tried again */
    return 0;
}

int srv_green_assign(struct srv_client *c)
{
    int rc = 0;
    pthread_mutex_lock(&green_lock);
    for (int d = 0; d < srv.ndev; d++) {
        c->lim->part[d] = -1;
        c->green->part[d] = NULL;
        c->green->own[d] = NULL;
    }
    c->green->given = 0;
    /* A device whose shared context is made at first use (devctx.c) and not yet: given with
     * the client's first context there (srv_green_assign_device), so that green contexts
     * are not made on a GPU this server may never use. */
    for (int d = 0; d < srv.ndev && !rc; d++)
        if (srv_device_made(d)) rc = assign_one(c, d);
    pthread_mutex_unlock(&green_lock);
    if (rc != 0) srv_green_release(c);
    return rc;
}

CUresult srv_green_assign_device(struct srv_client *c, int dev)
{
    int rc = 0;
    pthread_mutex_lock(&green_lock);
    if (dev >= 0 && dev < srv.ndev && !(c->green->given & (1ull << dev))) rc = assign_one(c, dev);
    pthread_mutex_unlock(&green_lock);
    if (rc != 0)
        srv_log("Client process %d: no green partition of %u SMs on device %d for its first "
                "context there",
                (int)c->pid, c->lim->sms[dev], dev);
    return rc ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUgreenCtx srv_green_ctx(struct srv_client *c, int dev)
{
    /* Looked up under the lock: the sets change as clients come and go. */
    CUgreenCtx g = NULL;
    pthread_mutex_lock(&green_lock);
    for (struct green_set *s = sets; s && !g; s = s->next)
        if (s->dev == dev && s->sms == c->lim->sms[dev] && c->lim->part[dev] >= 0 &&
            (unsigned)c->lim->part[dev] < s->nparts)
            g = s->ctx[c->lim->part[dev]];
    pthread_mutex_unlock(&green_lock);
    return g;
}

void srv_green_release(struct srv_client *c)
{
    pthread_mutex_lock(&green_lock);
    for (int d = 0; d < srv.ndev; d++) {
        /* The client's streams were destroyed before this: nothing runs there any more. A
         * context a fault killed is not the driver's to destroy now (fault.c). */
        if (c->green->own[d] && !srv_fault_dead(c, d)) DRV(cuGreenCtxDestroy)(c->green->own[d]);
        c->green->own[d] = NULL;
        if (c->lim->part[d] < 0) continue;
        struct green_set **pg = &sets;
        while (*pg && !((*pg)->dev == d && (*pg)->sms == c->lim->sms[d]))
            pg = &(*pg)->next;
        struct green_set *g = *pg;
        if (g && g->users[c->lim->part[d]] > 0) g->users[c->lim->part[d]]--;
        c->lim->part[d] = -1;
        c->green->part[d] = NULL;
        unsigned left = 0;
        for (unsigned i = 0; g && i < g->nparts; i++)
            left += g->users[i];
        if (g && !left) {
            /* The client's streams were destroyed before this: nothing runs here any more. */
            *pg = g->next;
            for (unsigned i = 0; i < g->nparts; i++)
                if (g->ctx[i]) DRV(cuGreenCtxDestroy)(g->ctx[i]);
            free(g);
        }
    }
    pthread_mutex_unlock(&green_lock);
}

/* Where a client's streams are made (family.c): in its partition's green context (its share of
 * the SMs), or in its own over every SM (MPSSHIM_GREEN_EACH); else in the shared context. */
static int green_stream_make(struct srv_client *c, int dev, CUstream *st, int prio, CUresult *r)
{
    CUgreenCtx g = c->green->part[dev] ? srv_green_ctx(c, dev) : c->green->own[dev];
    if (!g) return 0;
    *r = DRV(cuGreenCtxStreamCreate)(st, g, CU_STREAM_NON_BLOCKING, prio);
    return 1;
}

SRV_CLIENT_STATE(green, green)

const struct srv_family srv_family_green = {.name = "green",
                                            SRV_CLIENT_STATE_HOOKS(green),
                                            .client_fini = srv_green_release,
                                            .stream_make = green_stream_make};
