/* The generic forwarder that every generated sync/async stub calls: a described call's
 * arguments checked where the client can, the call sent (rpc.c), its reply and the mirror
 * of ranges and handles taken in. */
#include "interpose/shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel/marshal.h"

/* A device address the call names must lie in the caller's memory, as the span of its
 * description says; the driver refuses the rest at once, and so does the client. *host
 * is set when it is host memory mapped in both processes (pinned or managed), or a
 * __managed__ variable (whose host copy follows once the call completed, *mvar). */
static CUresult check_dptr(const struct shim_call *d, int i, const uint64_t *val, void *const *ptr,
                           int *host, int *mvar)
{
    const struct shim_param *p = &d->params[i];
    uint64_t v = val[i], bytes;
    struct shim_range rg;
    if (i == d->destroys) {
        /* Only the base of one of the caller's ranges of a kind it can free, or an address
         * inside graph memory. Address space it reserved is not in the mirror: a sync
         * call's answer comes from the server. */
        if (v == 0) return CUDA_SUCCESS;
        if (shim_range_find(v, 0, &rg) != 0)
            return d->cls == SHIM_SYNC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        /* Inside graph memory: an allocation of another graph at addresses of this one
         * (server/graphs/graphmem.c, aliased records), which the server's table knows. */
        if (rg.base != v && rg.kind == SHIM_HT_MEM_GRAPHMEM) return CUDA_SUCCESS;
        if (rg.base != v || rg.kind >= SHIM_NHTYPES ||
            (shim_types[rg.kind].destroyer < 0 && !(shim_types[rg.kind].flags & SHIM_TF_RELEASE)))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    if (p->creates) return CUDA_SUCCESS; /* the call makes a range there; the server checks where */
    if (!p->span || chan_span_eval(d, p->span, val, ptr, v, &bytes) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_SUCCESS;
    if (shim_range_find(v, bytes, &rg) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (i == d->host_sync && shim_range_is_host(rg.kind)) *host = 1;
    if (i == d->host_sync && (rg.flags & SHIM_RANGE_MVAR) && rg.kind == SHIM_HT_MEM_GLOBAL)
        *host = *mvar = 1;
    return CUDA_SUCCESS;
}

/* Members of structs the call reads that must be NULL (host pointers the server cannot
 * follow), and tagged unions of a kind the shim does not carry: refused at once, naming
 * the call. A device address member not aligned to its size or outside the caller's
 * memory: the driver's answer. */
static CUresult check_members(const struct shim_call *d, const struct shim_struct *st,
                              const void *elems, uint64_t count)
{
    char what[160];
    for (uint64_t e = 0; elems && e < count; e++) {
        const uint8_t *el = (const uint8_t *)elems + e * st->size;
        if (!shim_tag_known(st, el)) {
            int32_t tag;
            memcpy(&tag, el + st->tag_offset, sizeof(tag));
            snprintf(what, sizeof(what), "%s with a %s of tag %d", d->name, st->name, (int)tag);
            return shim_refuse(what);
        }
        for (uint32_t m = 0; m < st->nmembers; m++) {
            const struct shim_member *mb = &st->members[m];
            uint64_t v = 0;
            if (!shim_member_live(st, mb, el)) continue;
            memcpy(&v, el + mb->offset, mb->size);
            if (mb->kind == SHIM_MK_NULL && v != 0) {
                snprintf(what, sizeof(what), "%s with %s.%s set", d->name, st->name, mb->name);
                return shim_refuse(what);
            }
            /* An asynchronous call's errors come later: these, the driver's, at once here,
             * as for a device address parameter (check_dptr). */
            struct shim_range rg;
            if (mb->kind == SHIM_MK_SPAN &&
                (v % mb->bytes || shim_range_find(v, mb->bytes, &rg) != 0))
                return CUDA_ERROR_INVALID_VALUE;
            CUresult r;
            if (mb->kind == SHIM_MK_ARRAY && mb->st &&
                (r = check_members(d, mb->st, (const void *)(uintptr_t)v,
                                   chan_member_count(mb, el))) != CUDA_SUCCESS)
                return r;
        }
    }
    return CUDA_SUCCESS;
}

/* Graph memory keeps its address after a free outside its graph (its graph allocates it
 * again at the next launch); the server's table decides. */
static int keeps_address(uint64_t dptr)
{
    struct shim_range rg;
    return shim_range_find(dptr, 1, &rg) == 0 && rg.base == dptr && rg.kind == SHIM_HT_MEM_GRAPHMEM;
}

/* The range a call destroys (device memory), out of the mirror into *out: 1 if taken. */
static int take_range(const struct shim_call *d, const uint64_t *val, struct shim_range *out)
{
    const struct shim_param *p = &d->params[d->destroys];
    if (p->kind != SHIM_PK_DPTR || keeps_address(val[d->destroys])) return 0;
    return shim_range_remove(val[d->destroys], out) == 0;
}

/* A handle being destroyed leaves the client's table before the server destroys it, for
 * the reason take_range gives: the driver may hand its value to another thread's new
 * object at once (seen with events and streams made and destroyed by 8 threads: the new
 * event's record went with the old one's, and its next calls were refused). */
static int take_handle(const struct shim_call *d, const uint64_t *val, struct shim_known *out)
{
    const struct shim_param *p = &d->params[d->destroys];
    return p->kind != SHIM_PK_DPTR && shim_known_take(p->htype, val[d->destroys], out) == 0;
}

/* How many handles OUT parameter i of a call that returned holds: one, or as many as its
 * count says (a count the caller passes, or one the call wrote back: cuGraphGetNodes returns
 * how many it wrote, never more than the room it was given). At most OWNED_MAX, so that a
 * count the caller got wrong reads no further than a sane array. */
#define OWNED_MAX 65536
static uint64_t owned_count(const struct shim_call *d, int i, const uint64_t *val, void *const *ptr)
{
    const struct shim_param *p = &d->params[i];
    uint64_t n = 0;
    if (p->ckind == SHIM_CK_ONE) return 1;
    if (p->ckind == SHIM_CK_ARG) n = val[p->count_arg];
    if (p->ckind == SHIM_CK_DEREF && ptr[p->count_arg]) {
        uint32_t n32 = 0;
        if (d->params[p->count_arg].elem == sizeof(n)) {
            memcpy(&n, ptr[p->count_arg], sizeof(n));
        } else if (d->params[p->count_arg].elem == sizeof(n32)) {
            memcpy(&n32, ptr[p->count_arg], sizeof(n32));
            n = n32;
        }
    }
    return n < OWNED_MAX ? n : OWNED_MAX;
}

/* What a call made or destroyed, in the client's own mirror: ranges (so that copies and
 * pointer queries know them) and the handles the client knows itself. */
static void record(const struct shim_call *d, const uint64_t *val, void *const *ptr)
{
    uint32_t ctx = shim_route_ctx();
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (i == d->destroys)
            continue; /* it left the mirror before the call (take_range, take_handle) */
        int makes = p->kind == SHIM_PK_DPTR && p->creates; /* a range at an input address */
        if (!ptr[i] && !makes) continue;
        if (p->kind == SHIM_PK_RANGE || makes) {
            uint64_t size;
            uint64_t base = makes ? val[i] : *(const uint64_t *)ptr[i];
            if (chan_size_eval(d, &p->span->width, val, ptr, &size) != 0) continue;
            /* Reserved address space is no memory a copy or pointer query may name; which
             * server holds it is kept apart (reserved.c). */
            if (shim_types[p->htype].flags & SHIM_TF_UNMAPPED) {
                shim_reserved_made(base, size);
                continue;
            }
            struct shim_range rg = {
                .base = base,
                .size = size,
                .kind = p->htype,
                .ctx = (shim_types[p->htype].flags & SHIM_TF_CONTEXT_FREE) ||
                               (d->flags & SHIM_CF_CONTEXT_FREE)
                           ? 0
                           : ctx,
                .owner = d->parent >= 0 ? val[d->parent] : 0,
            };
            struct shim_range old;
            if (shim_range_find_here(rg.base, rg.size, &old) != 0) {
                shim_range_add(&rg);
                shim_mirror_made(&rg); /* where another server's context has peer access */
            }
        } else if (p->kind == SHIM_PK_OUT && p->creates &&
                   p->htype == SHIM_HT_CUmemGenericAllocationHandle) {
            shim_phys_made((uint64_t *)ptr[i]); /* the process's value of it (physical.c) */
        } else if (p->kind == SHIM_PK_OUT && shim_owned_kind(p->htype)) {
            /* A graph, node or pool, made or named, alone or in an array (cuGraphGetNodes):
             * where it lives (owned.c), a node with the graph the call named. */
            uint64_t n = owned_count(d, i, val, ptr);
            uint64_t graph = d->parent >= 0 && d->params[d->parent].kind == SHIM_PK_HANDLE &&
                                     d->params[d->parent].htype == SHIM_HT_CUgraph
                                 ? val[d->parent]
                                 : 0;
            for (uint64_t e = 0; e < n; e++)
                shim_owned_made(p->htype, ((const uint64_t *)ptr[i])[e], graph);
        } else if (p->kind == SHIM_PK_OUT && p->creates && p->htype &&
                   (shim_types[p->htype].flags & SHIM_TF_CLIENT)) {
            struct shim_known k = {.ctx = ctx};
            shim_known_add(p->htype, *(const uint64_t *)ptr[i], &k);
        }
    }
}

static const struct chan_keep keep = {.str = shim_intern, .array = shim_keep_array};

/* The call's arguments as sent: their values (val), the pointers the call reads or writes
 * (ptr) and the arguments packed from (args), with contexts by id and outputs the server
 * needs even where the caller passed NULL in storage of the caller's (spare, spare_ptr). */
static CUresult take_args(const struct shim_call *d, const void *const *argv, uint64_t *val,
                          uint64_t *spare, void **ptr, void **spare_ptr, const void **args)
{
    CUresult r;
    chan_values(d, argv, val);
    for (int i = 0; i < d->nparams; i++) {
        args[i] = argv[i];
        ptr[i] = NULL;
        if (d->params[i].kind == SHIM_PK_CTX) {
            /* The server knows contexts by id. */
            uint32_t ctx = 0;
            CUcontext h = *(const CUcontext *)argv[i];
            if (h && (r = shim_ctx_lookup(h, &ctx, NULL)) != CUDA_SUCCESS) return r;
            val[i] = spare[i] = ctx;
            args[i] = &spare[i];
            continue;
        }
        if (d->params[i].kind < SHIM_PK_IN) continue;
        ptr[i] = *(void *const *)argv[i];
        if (!ptr[i] && ((d->needed >> i) & 1) && d->params[i].kind != SHIM_PK_OUTSTR) {
            spare[i] = 0;
            spare_ptr[i] = ptr[i] = &spare[i];
            args[i] = &spare_ptr[i];
        }
    }
    return CUDA_SUCCESS;
}

/* Refuses at once what the client can check itself. No context check here for the rest:
 * device-level calls work without one, and the server refuses handles that need one.
 * Streams and events are known here, so a bad one is refused at once, even by an async
 * call whose server-side error would only show later; so are device addresses outside the
 * caller's memory. */
static CUresult check_args(const struct shim_call *d, const uint64_t *val, void *const *ptr,
                           int *host, int *mvar)
{
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (p->kind == SHIM_PK_HANDLE)
            r = shim_handle_check(p->htype, val[i]);
        else if (p->kind == SHIM_PK_DPTR)
            r = check_dptr(d, i, val, ptr, host, mvar);
        else if (p->st && p->kind != SHIM_PK_OUT && ptr[i]) {
            uint64_t n = 1;
            if (p->ckind == SHIM_CK_ARG) n = val[p->count_arg];
            r = check_members(d, p->st, ptr[i], n);
        }
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

/* Packs the call straight into the ring (n bytes, sized before) and sends it; where it
 * waits for the reply, the outputs go to the caller's. */
static CUresult send_call(int id, const struct shim_call *d, const void **args, size_t n, int reply,
                          unsigned flags, CUstream work)
{
    const size_t cap = CHAN_REC_MAX - sizeof(struct chan_rec);
    size_t reply_len;
    struct shim_req q;
    /* Arguments that lie in migrating managed memory fault in here, outside the request: a
     * fault while the ring is held could not be served (migrate.c). */
    uint8_t *staged = NULL;
    CUresult r = CUDA_SUCCESS;
    if (n && shim_mig_live()) {
        /* Room for what packing may write (cap, as in the ring), of which n is the call. */
        if (!(staged = shim_stage())) return CUDA_ERROR_OUT_OF_MEMORY;
        chan_pack_call(d, args, staged, cap, &reply_len, &r);
    }
    if ((r = shim_req_begin(&q, (unsigned)id, (uint32_t)n, reply, flags)) != CUDA_SUCCESS) return r;
    if (staged)
        memcpy(q.payload, staged, n);
    else
        chan_pack_call(d, args, q.payload, cap, &reply_len, &r);
    shim_req_send(&q);
    if (d->cls == SHIM_ASYNC) shim_mvar_worked(work);
    if (!reply) return CUDA_SUCCESS;
    const uint8_t *data;
    uint32_t len;
    r = shim_req_wait(&q, &data, &len);
    if (r != CUDA_SUCCESS) {
        /* The driver's report of why, where the call has one (always-out:). */
        if (len) chan_unpack_reply(d, args, data, len, &keep, SHIM_PF_ON_ERROR);
        return r;
    }
    chan_unpack_reply(d, args, data, len, &keep, 0);
    return CUDA_SUCCESS;
}

/* After a call that succeeded: the mirror learns what it made, its hook runs, and a
 * __managed__ variable it set takes what the device now holds. */
static CUresult finish_call(const struct shim_call *d, const struct shim_hook *hook,
                            const uint64_t *val, void *const *ptr, const void **args, int mvar,
                            uint64_t gen)
{
    record(d, val, ptr);
    if (hook && hook->after) hook->after(args);
    /* A synchronous memset of a __managed__ variable completed in the server: its host
     * copy takes what the device now holds. */
    if (mvar) {
        CUresult r = CUDA_SUCCESS;
        shim_mvar_synced(SHIM_MVAR_OTHER, NULL, 0, gen, &r);
        if (r != CUDA_SUCCESS) return r;
    }
    return hook && hook->finish ? hook->finish(args) : CUDA_SUCCESS;
}

static CUresult forward_checked(int id, const struct shim_call *d, const struct shim_hook *hook,
                                const void *const *argv, uint64_t *val, void **ptr,
                                const void **args, int host, int mvar);

/* The client's forwarding of a described (sync/async) call: arguments checked here where
 * the client can, the call sent, its reply and the mirror taken in. */
CUresult shim_forward(int id, const void *const *argv)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    const struct shim_call *d = &shim_calls[id];
    const struct shim_hook *hook = shim_hooks[id];
    if ((d->flags & SHIM_CF_CONTEXT) && (r = shim_need_ctx()) != CUDA_SUCCESS) return r;
    /* Outputs the server needs even when the caller passes NULL (a range's base and size)
     * are asked for into storage of our own, so that the mirror learns them too. */
    uint64_t val[CHAN_MAX_ARGS], spare[CHAN_MAX_ARGS];
    void *ptr[CHAN_MAX_ARGS], *spare_ptr[CHAN_MAX_ARGS];
    const void *args[CHAN_MAX_ARGS];
    if (d->nparams > CHAN_MAX_ARGS) return CUDA_ERROR_NOT_SUPPORTED;
    if ((r = take_args(d, argv, val, spare, ptr, spare_ptr, args)) != CUDA_SUCCESS) return r;
    int host = 0, mvar = 0;
    if ((r = check_args(d, val, ptr, &host, &mvar)) != CUDA_SUCCESS) return r;
    /* To the server of what it names, where the process holds one per device (route.c). */
    struct shim_route saved;
    int routed = shim_route_call(d, val, ptr, &saved, &r);
    if (routed == -2) return r; /* answered there (mirror.c) */
    if (routed < 0)
        return shim_across_wait_event(*(const CUstream *)argv[0], *(const CUevent *)argv[1],
                                      *(const unsigned *)argv[2]);
    if (r != CUDA_SUCCESS) return r;
    /* Libraries and kernels as that server names them (replicas.c). */
    for (int i = 0; i < d->nparams && r == CUDA_SUCCESS && atomic_load(&shim_conns_extra); i++) {
        const struct shim_param *p = &d->params[i];
        if (p->kind != SHIM_PK_HANDLE ||
            (p->htype != SHIM_HT_CUlibrary && p->htype != SHIM_HT_CUkernel &&
             p->htype != SHIM_HT_CUfunction)) /* a kernel stands for a function too */
            continue;
        uint64_t there;
        if ((r = shim_replica_for(val[i], shim_route_device(), &there)) == CUDA_SUCCESS &&
            there != val[i]) {
            val[i] = spare[i] = there;
            args[i] = &spare[i];
        }
    }
    /* Physical memory handles as that server names them (physical.c). */
    uint64_t imported = 0;
    if (r == CUDA_SUCCESS) r = shim_phys_args(d, val, spare, args, &imported);
    if (r == CUDA_SUCCESS) r = forward_checked(id, d, hook, argv, val, ptr, args, host, mvar);
    if (imported) cuMemRelease((CUmemGenericAllocationHandle)imported); /* the mapping holds it */
    if (r == CUDA_SUCCESS && d->destroys >= 0 &&
        d->params[d->destroys].htype == SHIM_HT_CUmemGenericAllocationHandle)
        shim_phys_released(*(const uint64_t *)argv[d->destroys]);
    if (r == CUDA_SUCCESS && d == &shim_calls[SHIM_ID_cuMemAddressFree])
        shim_reserved_freed(*(const CUdeviceptr *)argv[0]);
    if (r == CUDA_SUCCESS && d->destroys >= 0 && shim_owned_kind(d->params[d->destroys].htype))
        shim_owned_gone(d->params[d->destroys].htype, *(const uint64_t *)argv[d->destroys]);
    /* The access a moved process's pool gave other GPUs goes with it (moved.c). */
    if (r == CUDA_SUCCESS && d->destroys >= 0 &&
        d->params[d->destroys].htype == SHIM_HT_CUmemoryPool)
        shim_moved_pool_gone(*(const uint64_t *)argv[d->destroys]);
    if (routed) shim_route_end(&saved);
    return r;
}

/* The device a call marked loads-code loads on, as the server gates it (codegate.c): the
 * device it names, else the current context's. */
static int loads_on(const struct shim_call *d, const uint64_t *val)
{
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].kind == SHIM_PK_VAL && (d->params[i].pflags & SHIM_PF_DEVICE))
            return (int)val[i];
    return shim_current_device();
}

/* The rest of shim_forward, once the arguments are taken, checked and routed. */
static CUresult forward_checked(int id, const struct shim_call *d, const struct shim_hook *hook,
                                const void *const *argv, uint64_t *val, void **ptr,
                                const void **args, int host, int mvar)
{
    CUresult r;
    if (hook && hook->before && (r = hook->before(args)) != CUDA_SUCCESS) return r;
    if (hook && hook->known && hook->known(args)) return CUDA_SUCCESS;
    if (hook && hook->rewrite && hook->rewrite(args)) return CUDA_SUCCESS;
    /* The server may load code for it, which waits for every stream (hostfn.c). */
    if (d->flags & SHIM_CF_LOADS_CODE) shim_hostfn_settle(loads_on(d, val));
    /* Device work: the host's writes to __managed__ variables go first (mvars.c). */
    uint64_t gen = mvar ? shim_mvar_sync_begin() : 0;
    CUstream work =
        d->cls == SHIM_ASYNC && d->stream >= 0 ? *(const CUstream *)argv[d->stream] : NULL;
    if (d->cls == SHIM_ASYNC && (r = shim_mvar_work(work)) != CUDA_SUCCESS) return r;
    /* A synchronous memset of host memory is device work on managed memory (migrate.c). */
    if (d->cls != SHIM_ASYNC && host && (r = shim_mig_work()) != CUDA_SUCCESS) return r;
    /* Size first (the record is reserved whole), then pack straight into the ring. */
    const size_t cap = CHAN_REC_MAX - sizeof(struct chan_rec);
    size_t reply_len;
    size_t n = chan_pack_call(d, args, NULL, cap, &reply_len, &r);
    if (r != CUDA_SUCCESS) return r;
    if (reply_len > CHAN_LANE_DATA) return CUDA_ERROR_INVALID_VALUE;
    /* An async call waits only when it touches host memory that must be set on return, or
     * when another process may act on it at once (its hook says). */
    int reply = d->cls == SHIM_SYNC || host || (hook && hook->wait && hook->wait(args));
    unsigned flags = (d->flags & SHIM_CF_PTDS) ? CHAN_RF_PTDS : 0;
    if (hook && hook->known) flags |= SHIM_RQ_QUIET; /* a query: it enqueues nothing */
    /* Memory being freed leaves the mirror before the server frees it: once freed, the
     * driver may hand the address to another thread of this process at once, whose new
     * range must not find this one still there (the mirror refuses overlaps, and the new
     * range would then be missing: copies to it refused). Put back if the call fails. */
    struct shim_range taken;
    int took = d->destroys >= 0 && take_range(d, val, &taken);
    if (took) shim_mirror_freeing(taken.base); /* its mirrors in other servers first */
    struct shim_known taken_h;
    int took_h = d->destroys >= 0 && take_handle(d, val, &taken_h);
    if ((r = send_call(id, d, args, n, reply, flags, work)) != CUDA_SUCCESS) {
        if (took) shim_range_add(&taken);
        if (took_h) shim_known_add(d->params[d->destroys].htype, val[d->destroys], &taken_h);
        return r;
    }
    return finish_call(d, hook, val, ptr, args, mvar, gen);
}
