/* Replay of described (`sync`/`async`) calls, through libffi: decode the arguments into
 * the worker's private memory, check every handle, device address and struct member
 * against the caller's objects, map its streams, run the family's hooks and the driver
 * call, register what the call made and forget what it destroyed, and reply with the
 * outputs. Nothing is read from shared memory after the record was copied out of the
 * ring, and the reply is written to the lane only at the end (a client thread cannot
 * change what the server decides from). */
#include "server/core/server.h"
#include "server/core/devctx.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/code/codegate.h"
#include "server/core/devices.h"
#include "server/core/generic.h"
#include "server/graphs/graph.h"
#include "server/memory/managed.h"
#include "server/memory/memops.h"
#include "server/limits/account.h"

#include <ffi.h>
#include <stdlib.h>
#include <string.h>

/* Prepared once at start, read-only afterwards. cif_ok 0: the call cannot be replayed. A
 * via: target's interface takes the appended stream like any of its own parameters. */
static ffi_cif cifs[SHIM_NCALLS];
static ffi_type *argtypes[SHIM_NCALLS][CHAN_MAX_ARGS];
static int cif_ok[SHIM_NCALLS];
/* A question the driver answers with no context current: about a device (cuDeviceGet*,
 * cuDeviceCanAccessPeer, cuDeviceTotalMem), not about its pools or graph memory, which live
 * in its primary context; and the module loading mode (PyTorch asks it before its first
 * context: on two H200s it made device 0's context in the pipe directory's server of moving
 * clients). Where contexts are made at first use (devctx.c), none is made for one. */
static int device_query[SHIM_NCALLS];

static ffi_type *type_of(const struct shim_param *p)
{
    if (p->kind != SHIM_PK_VAL && p->kind != SHIM_PK_RAW && p->kind != SHIM_PK_HANDLE)
        return p->size == 8 && p->kind == SHIM_PK_DPTR ? &ffi_type_uint64 : &ffi_type_pointer;
    switch (p->vclass) {
    case SHIM_VC_S8:
        return &ffi_type_sint8;
    case SHIM_VC_U8:
        return &ffi_type_uint8;
    case SHIM_VC_S16:
        return &ffi_type_sint16;
    case SHIM_VC_U16:
        return &ffi_type_uint16;
    case SHIM_VC_S32:
        return &ffi_type_sint32;
    case SHIM_VC_U32:
        return &ffi_type_uint32;
    case SHIM_VC_S64:
        return &ffi_type_sint64;
    case SHIM_VC_U64:
        return &ffi_type_uint64;
    case SHIM_VC_F32:
        return &ffi_type_float;
    case SHIM_VC_F64:
        return &ffi_type_double;
    case SHIM_VC_PTR:
        return &ffi_type_pointer;
    default:
        return NULL; /* structs by value are not replayed generically */
    }
}

int srv_generic_init(void)
{
    for (int id = 0; id < SHIM_NCALLS; id++) {
        const struct shim_call *d = &shim_calls[id];
        if (d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC) continue;
        if (d->nparams > CHAN_MAX_ARGS) {
            srv_log("%s: too many parameters to replay", d->name);
            continue;
        }
        device_query[id] = (strncmp(d->name, "cuDeviceGet", 11) == 0 ||
                            strncmp(d->name, "cuDeviceCanAccessPeer", 21) == 0 ||
                            strncmp(d->name, "cuDeviceTotalMem", 16) == 0 ||
                            strcmp(d->name, "cuModuleGetLoadingMode") == 0) &&
                           !strstr(d->name, "MemPool") && !strstr(d->name, "GraphMem");
        int ok = 1;
        for (int i = 0; i < d->nparams; i++)
            if (!(argtypes[id][i] = type_of(&d->params[i]))) {
                srv_log("%s: parameter %d is a struct by value; not replayed", d->name, i);
                ok = 0;
            }
        if (ok && ffi_prep_cif(&cifs[id], FFI_DEFAULT_ABI, d->nparams, &ffi_type_sint,
                               argtypes[id]) == FFI_OK)
            cif_ok[id] = 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- checks */

/* Checks a handle the client named and gives the value to pass to the driver. NULL means
 * "none" where the API allows it (the driver answers for it; it names nobody's object),
 * except for streams, where it is the client's default stream. */
static CUresult check_handle(struct srv_client *c, const struct chan_rec *r, uint32_t ht,
                             uint64_t v, uint64_t *out)
{
    *out = v;
    switch (ht) {
    case SHIM_HT_CUstream: {
        struct srv_stream *s = srv_stream_resolve(c, v, r->flags & CHAN_RF_PTDS, r->thread);
        if (!s) return c->cur ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
        *out = (uint64_t)(uintptr_t)s->real;
        return CUDA_SUCCESS;
    }
    case SHIM_HT_CUfunction:
        return v == 0 || srv_func_known(c, v) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case SHIM_HT_CUcontext:
    case SHIM_HT_CUgreenCtx:
        return CUDA_ERROR_INVALID_CONTEXT; /* the generator never lets these through */
    default:
        return v == 0 || srv_obj_find(c, ht, v) ? CUDA_SUCCESS : (CUresult)shim_types[ht].bad;
    }
}

/* The element count a pointer parameter has per its description (for one the caller
 * passed as NULL). */
static uint64_t expected_count(const struct shim_call *d, const struct shim_param *p,
                               const struct chan_args *a)
{
    switch (p->ckind) {
    case SHIM_CK_ONE:
        return 1;
    case SHIM_CK_FIXED:
        return p->count_fixed;
    case SHIM_CK_ARG:
        return a->val[p->count_arg];
    case SHIM_CK_FN:
        return shim_size_fns[p->count_fixed](a->val[p->count_arg]);
    default: {
        /* the entry value of an inout count */
        uint64_t n = 0;
        uint32_t size = d->params[p->count_arg].elem;
        if (a->ptr[p->count_arg] && size <= sizeof(n))
            memcpy(&n, a->ptr[p->count_arg], size); /* little-endian: the low bytes */
        return n;
    }
    }
}

/* The registry record a parameter names (the parent of what a call makes). */
static struct srv_obj *named_obj(struct srv_client *c, const struct shim_param *p, uint64_t v)
{
    if (p->htype == SHIM_HT_CUfunction && !srv_obj_find(c, SHIM_HT_CUfunction, v))
        return srv_obj_find(c, SHIM_HT_CUkernel, v);
    return p->htype ? srv_obj_find(c, p->htype, v) : NULL;
}

/* Maps the client's device ordinals in a CUdevice array, in (to the server's) or out (back);
 * CUDA_ERROR_INVALID_DEVICE, the driver's answer, for a device the client was not given. */
static CUresult map_devices(const struct srv_client *c, uint8_t *buf, uint32_t count, int in)
{
    for (uint32_t e = 0; e < count; e++) {
        CUdevice v;
        memcpy(&v, buf + (size_t)e * sizeof(v), sizeof(v));
        int d = in ? srv_dev_in(c, v) : srv_dev_out(c, v);
        if (d < 0) return CUDA_ERROR_INVALID_DEVICE;
        v = d;
        memcpy(buf + (size_t)e * sizeof(v), &v, sizeof(v));
    }
    return CUDA_SUCCESS;
}

static CUresult map_device_member(const struct srv_client *c, const struct shim_member *mb,
                                  uint8_t *el, int in)
{
    if (mb->kind == SHIM_MK_LOCATION) return srv_dev_location(c, el + mb->offset, in);
    return map_devices(c, el + mb->offset, 1, in);
}

/* Outputs that name devices, back to the client's ordinals. */
static CUresult map_outputs(const struct srv_client *c, struct srv_call *k)
{
    const struct shim_call *d = k->d;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if ((p->kind != SHIM_PK_OUT && p->kind != SHIM_PK_INOUT) || !k->a.ptr[i]) continue;
        if ((p->pflags & SHIM_PF_DEVICE) && p->elem == sizeof(CUdevice) &&
            map_devices(c, k->a.ptr[i], k->a.count[i], 0) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_DEVICE;
        for (uint32_t e = 0; p->st && e < k->a.count[i]; e++)
            for (uint32_t m = 0; m < p->st->nmembers; m++) {
                const struct shim_member *mb = &p->st->members[m];
                uint8_t *el = (uint8_t *)k->a.ptr[i] + (size_t)e * p->st->size;
                if ((mb->kind == SHIM_MK_DEVICE || mb->kind == SHIM_MK_LOCATION) &&
                    shim_member_live(p->st, mb, el) &&
                    map_device_member(c, mb, el, 0) != CUDA_SUCCESS)
                    return CUDA_ERROR_INVALID_DEVICE;
            }
    }
    return CUDA_SUCCESS;
}

/* Members of struct elements the client sent: handles checked and mapped in place (the
 * elements are the server's private copy), pointers that must be NULL refused, device
 * addresses checked against the caller's ranges; of a tagged union, the members its tag
 * makes live, and a tag no case names refused. */
static CUresult check_members(struct srv_client *c, const struct chan_rec *r,
                              const struct shim_struct *st, uint8_t *buf, uint32_t count)
{
    for (uint32_t e = 0; e < count; e++) {
        uint8_t *el = buf + (size_t)e * st->size;
        if (!shim_tag_known(st, el)) return CUDA_ERROR_NOT_SUPPORTED;
        for (uint32_t m = 0; m < st->nmembers; m++) {
            const struct shim_member *mb = &st->members[m];
            uint64_t v = 0, mapped;
            if (!shim_member_live(st, mb, el)) continue;
            if (mb->kind == SHIM_MK_DEVICE || mb->kind == SHIM_MK_LOCATION) {
                CUresult res = map_device_member(c, mb, el, 1);
                if (res != CUDA_SUCCESS) return res;
                continue;
            }
            memcpy(&v, el + mb->offset, mb->size);
            if (mb->kind == SHIM_MK_NULL && v != 0) return CUDA_ERROR_NOT_SUPPORTED;
            if (mb->kind == SHIM_MK_SPAN && (v % mb->bytes || !srv_range_find(c, v, mb->bytes)))
                return CUDA_ERROR_INVALID_VALUE;
            CUresult res = CUDA_SUCCESS;
            /* An array's elements: the server's copies, which the unpacking pointed it at. */
            if (mb->kind == SHIM_MK_ARRAY && mb->st)
                res = check_members(c, r, mb->st, (uint8_t *)(uintptr_t)v,
                                    (uint32_t)chan_member_count(mb, el));
            if (res != CUDA_SUCCESS) return res;
            if (mb->kind != SHIM_MK_HANDLE) continue;
            res = check_handle(c, r, mb->htype, v, &mapped);
            if (res != CUDA_SUCCESS) return res;
            memcpy(el + mb->offset, &mapped, mb->size);
        }
    }
    return CUDA_SUCCESS;
}

/* A device address parameter: the memory its span names lies in one of the caller's
 * ranges. A destroyed address must be the base of a range its type can destroy (or an
 * allocation inside an aliased graph memory record: graphmem.c). */
static CUresult check_dptr(struct srv_client *c, const struct shim_call *d, int i,
                           const struct chan_args *a, struct srv_obj **found)
{
    const struct shim_param *p = &d->params[i];
    uint64_t v = a->val[i], bytes = 0;
    *found = NULL;
    if (i == d->destroys) {
        if (v == 0) return CUDA_SUCCESS; /* freeing NULL: the driver's answer */
        struct srv_obj *o = srv_range_find(c, v, 0);
        /* Address space the client reserved is not in the lookups: found by its base. */
        for (uint32_t t = 1; t < SHIM_NHTYPES && !o; t++)
            if (shim_types[t].flags & SHIM_TF_UNMAPPED) o = srv_obj_find(c, t, v);
        /* An aliased graph memory record holds allocations at addresses inside it. */
        if (!o || (o->key.value != v && !srv_graphmem_aliased(o)) ||
            (shim_types[o->key.type].destroyer < 0 &&
             !(shim_types[o->key.type].flags & SHIM_TF_RELEASE)))
            return CUDA_ERROR_INVALID_VALUE;
        *found = o;
        return CUDA_SUCCESS;
    }
    if (p->creates) return CUDA_SUCCESS; /* the call makes a range there (its hook checks where) */
    if (!p->span) return CUDA_ERROR_INVALID_VALUE;
    if (chan_span_eval(d, p->span, a->val, a->ptr, v, &bytes) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_SUCCESS; /* touches nothing */
    *found = srv_range_find(c, v, bytes);
    return *found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- what a call made */

/* An OUTREF output: the elements of the driver's array go in the reply (the client keeps
 * them for its thread), their handles registered as the client's to use. */
static CUresult give_array(struct srv_client *c, struct srv_call *k, int i)
{
    const struct shim_param *p = &k->d->params[i];
    const uint8_t *arr = (const uint8_t *)(uintptr_t)k->a.spare[i];
    uint64_t n = 0;
    const void *cp = k->a.ptr[p->count_arg];
    if (cp) memcpy(&n, cp, sizeof(size_t));
    if (n > CHAN_OUTREF_MAX) return CUDA_ERROR_NOT_SUPPORTED; /* more than the reply carries */
    if (!arr) n = 0;
    uint8_t *to = k->a.out + k->a.out_off[i];
    memcpy(to, &n, 8);
    if (n) memcpy(to + 8, arr, n * p->elem);
    for (uint64_t e = 0; p->htype && e < n; e++) {
        uint64_t v = 0;
        memcpy(&v, arr + e * p->elem, p->elem);
        if (v && !srv_obj_add(c, p->htype, v, 0, k->parent)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Registers the handles and ranges a successful call returned; on failure (out of memory,
 * a range that overlaps) the driver's object is destroyed again where we own it. */
static CUresult register_outputs(struct srv_client *c, struct srv_call *k)
{
    const struct shim_call *d = k->d;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        int makes = p->kind == SHIM_PK_DPTR && p->creates; /* a range at an input address */
        if (!k->a.ptr[i] && !makes) continue;
        if (p->kind == SHIM_PK_OUT && p->htype) {
            for (uint32_t e = 0; e < k->a.count[i]; e++) {
                uint64_t v = 0;
                memcpy(&v, (uint8_t *)k->a.ptr[i] + (size_t)e * p->elem, p->elem);
                if (v &&
                    !srv_obj_add(c, p->htype, v, p->creates, i == d->parent ? NULL : k->parent)) {
                    if (p->creates) srv_obj_undo(c, p->htype, v, 0);
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
            }
            /* The parent of what else the call returns may be this output (the graph a
             * capture builds, of the nodes it also returns). */
            if (i == d->parent && k->a.count[i] == 1) {
                uint64_t v = 0;
                memcpy(&v, k->a.ptr[i], p->elem);
                k->parent = srv_obj_find(c, p->htype, v);
            }
        } else if (p->kind == SHIM_PK_OUTREF) {
            CUresult r = give_array(c, k, i);
            if (r != CUDA_SUCCESS) return r;
        } else if (p->kind == SHIM_PK_RANGE || makes) {
            if (p->kind == SHIM_PK_RANGE && k->a.absent[i]) continue;
            uint64_t base = makes ? k->a.val[i] : *(uint64_t *)k->a.ptr[i];
            uint64_t size;
            const struct shim_type *t = &shim_types[p->htype];
            if (chan_size_eval(d, &p->span->width, k->a.val, k->a.ptr, &size) != 0)
                size = UINT64_MAX;
            /* A range whose size was known before the call was checked then (check_limit),
             * and what that check allowed stays reserved until the record is done
             * (account.c): checked again, it would be counted twice. */
            int checked = p->kind == SHIM_PK_RANGE && !p->after;
            int fits = !(t->flags & SHIM_TF_COUNTS) || checked || srv_mem_fits(c, k->dev, size);
            struct srv_obj *o = fits && size != UINT64_MAX
                                    ? srv_range_add(c, p->htype, base, size, p->creates, k->parent)
                                    : NULL;
            if (!o) {
                if (p->creates) srv_obj_undo(c, p->htype, base, size);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            if (d->flags & SHIM_CF_CONTEXT_FREE)
                o->ctx = 0; /* ctx-free: it goes with its parent or the client */
            if (t->flags & SHIM_TF_COUNTS) srv_obj_count(c, o, k->dev, size);
        }
    }
    return CUDA_SUCCESS;
}

/* Memory a range the call makes will count, when its size is known before the call. */
static CUresult check_limit(struct srv_client *c, struct srv_call *k)
{
    const struct shim_call *d = k->d;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (p->kind != SHIM_PK_RANGE || p->after || !(shim_types[p->htype].flags & SHIM_TF_COUNTS))
            continue;
        uint64_t size;
        if (chan_size_eval(d, &p->span->width, k->a.val, k->a.ptr, &size) != 0 ||
            !srv_mem_fits(c, k->dev, size))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Output strings: the driver gave a pointer of its own; the text goes in the reply. */
static void copy_strings(struct srv_call *k)
{
    for (int i = 0; i < k->d->nparams; i++) {
        if (k->d->params[i].kind != SHIM_PK_OUTSTR || k->a.absent[i]) continue;
        const char *s = (const char *)(uintptr_t)k->a.spare[i];
        char *to = (char *)k->a.out + k->a.out_off[i];
        if (s) {
            size_t n = strnlen(s, CHAN_OUTSTR_MAX - 1);
            memcpy(to, s, n);
            to[n] = '\0';
        }
    }
}

/* ---------------------------------------------------------------- replay */

/* k->drive. */
static CUresult drive(struct srv_call *k)
{
    const struct shim_call *d = k->d;
    int via = d->target && d->cls != SHIM_TWIN ? d->target : 0;
    int id = via ? via : k->id;
    void *avalue[CHAN_MAX_ARGS + 1];
    for (int i = 0; i <= d->nparams && i <= CHAN_MAX_ARGS; i++)
        avalue[i] = &k->vals[i];
    ffi_sarg rc = 0;
    ffi_call(&cifs[id], FFI_FN(srv_drv_fns[id]), &rc, avalue);
    return (CUresult)rc;
}

/* Handle elements of an input array: the client's, checked and mapped in place (the
 * elements are the server's private copy). */
static CUresult check_elements(struct srv_client *c, struct srv_call *k, int i)
{
    const struct shim_param *pp = &k->d->params[i];
    for (uint32_t e = 0; e < k->a.count[i]; e++) {
        uint64_t h = 0, m;
        CUresult res;
        memcpy(&h, (uint8_t *)k->a.ptr[i] + (size_t)e * pp->elem, pp->elem);
        if ((res = check_handle(c, k->r, pp->htype, h, &m)) != CUDA_SUCCESS) return res;
        memcpy((uint8_t *)k->a.ptr[i] + (size_t)e * pp->elem, &m, pp->elem);
    }
    return CUDA_SUCCESS;
}

/* A pointer parameter: NULL refused where the driver would read from it, and the handles,
 * struct members and devices of an input checked and mapped. */
static CUresult check_pointer(struct srv_client *c, struct srv_call *k, int i)
{
    const struct shim_call *d = k->d;
    const struct shim_param *pp = &d->params[i];
    CUresult res;
    /* An input the driver would read from NULL: refused here, as the driver
     * refuses it (and driver 580's cuMemPoolSetAttribute would crash on it),
     * unless NULL means "none" there (opt-in:). */
    if (!k->a.ptr[i] && (pp->kind == SHIM_PK_IN || pp->kind == SHIM_PK_INOUT) &&
        !(pp->pflags & SHIM_PF_OPTIONAL) && expected_count(d, pp, &k->a) > 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (k->a.ptr[i] && (pp->kind == SHIM_PK_IN || pp->kind == SHIM_PK_INOUT)) {
        /* Handle elements and struct members of inputs are the client's too. */
        if (pp->htype && (res = check_elements(c, k, i)) != CUDA_SUCCESS) return res;
        if (pp->st &&
            (res = check_members(c, k->r, pp->st, k->a.ptr[i], k->a.count[i])) != CUDA_SUCCESS)
            return res;
        if ((pp->pflags & SHIM_PF_DEVICE) && pp->elem == sizeof(CUdevice) &&
            (res = map_devices(c, k->a.ptr[i], k->a.count[i], 1)) != CUDA_SUCCESS)
            return res;
    }
    k->vals[i] = (uint64_t)(uintptr_t)k->a.ptr[i];
    return CUDA_SUCCESS;
}

/* Checks parameter i and sets what the driver gets for it (k->vals[i]); *destroyed is the
 * record the call destroys, *host the host memory whose work completes before the reply. */
static CUresult check_param(struct srv_client *c, struct srv_call *k, int i,
                            struct srv_obj **destroyed, struct srv_obj **host)
{
    const struct shim_call *d = k->d;
    const struct shim_param *pp = &d->params[i];
    struct srv_obj *o;
    CUresult res;
    switch (pp->kind) {
    case SHIM_PK_HANDLE:
        if ((res = check_handle(c, k->r, pp->htype, k->a.val[i], &k->vals[i])) != CUDA_SUCCESS)
            return res;
        /* Only what the client made itself: a library's module, say, is not its own. */
        if (i == d->destroys &&
            (!(*destroyed = srv_obj_find(c, pp->htype, k->a.val[i])) || !(*destroyed)->owned))
            return CUDA_ERROR_INVALID_HANDLE;
        return CUDA_SUCCESS;
    case SHIM_PK_DPTR:
        if ((res = check_dptr(c, d, i, &k->a, &o)) != CUDA_SUCCESS) return res;
        if (i == d->destroys) *destroyed = o;
        /* Managed variables too: the client's host copy is brought in afterwards. */
        if (i == d->host_sync && o && (srv_host_type(o->key.type) || srv_managed_var(o))) *host = o;
        k->vals[i] = k->a.val[i];
        return CUDA_SUCCESS;
    case SHIM_PK_VAL:
        /* A CUdevice is the client's ordinal: the server's from here on (hooks too). */
        if ((pp->pflags & SHIM_PF_DEVICE)) {
            int dev = srv_dev_in(c, (int64_t)(int32_t)k->a.val[i]);
            if (dev < 0) return CUDA_ERROR_INVALID_DEVICE;
            k->a.val[i] = (uint64_t)dev;
        }
        k->vals[i] = k->a.val[i];
        return CUDA_SUCCESS;
    case SHIM_PK_RAW:
        k->vals[i] = k->a.val[i];
        return CUDA_SUCCESS;
    case SHIM_PK_CTX: {
        /* The client's context (by id) names a device: its real context. */
        struct srv_ctx *x = k->a.val[i] ? srv_ctx_get(c, (uint32_t)k->a.val[i]) : NULL;
        if (k->a.val[i] && !x) return CUDA_ERROR_INVALID_CONTEXT;
        k->vals[i] = x ? (uint64_t)(uintptr_t)srv.ctx[x->device] : 0;
        return CUDA_SUCCESS;
    }
    default:
        return check_pointer(c, k, i);
    }
}

/* Stream order: the call goes on the client's stream (or, via:, its default stream),
 * after what CUDA's legacy semantics say it must follow; k->dev is that stream's device. */
static CUresult resolve_stream(struct srv_client *c, struct srv_call *k, int via)
{
    const struct shim_call *d = k->d;
    if (d->stream < 0 && !via) return CUDA_SUCCESS;
    uint64_t h = d->stream >= 0 ? k->a.val[d->stream] : 0;
    k->stream = srv_stream_resolve(c, h, k->r->flags & CHAN_RF_PTDS, k->r->thread);
    if (!k->stream) return c->cur ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
    k->dev = k->stream->device;
    return CUDA_SUCCESS;
}

/* Runs the checked call (its family's hook, or the driver through libffi) on its real
 * stream, inside the code gate; on failure, whether its outputs say why (k->report). */
static CUresult run_call(struct srv_client *c, struct srv_call *k, const struct srv_hook *hook,
                         int via, struct srv_obj *destroyed)
{
    const struct shim_call *d = k->d;
    CUresult res = CUDA_SUCCESS;
    if (k->stream) {
        CUstream st = srv_stream_prepare(c, k->stream);
        if (via)
            k->vals[d->nparams] = (uint64_t)(uintptr_t)st;
        else
            k->vals[d->stream] = (uint64_t)(uintptr_t)st;
    }
    int gated = srv_codegate_call_begin(c, k, &res);
    if (res != CUDA_SUCCESS) return res;
    /* Memory about to go: the client's stream waits on it end first (memops.c). */
    if (destroyed && destroyed->size)
        srv_memops_end_range(c, destroyed->key.value, destroyed->size);
    res = hook && hook->call ? hook->call(c, k) : drive(k);
    srv_codegate_call_end(gated);
    if (res != CUDA_SUCCESS)
        for (int i = 0; i < d->nparams; i++)
            k->report |= (d->params[i].pflags & SHIM_PF_ON_ERROR) != 0;
    return res;
}

/* After a successful call: what it made registered, its hook's after run, devices in its
 * outputs mapped back, what it destroyed forgotten, output strings copied to the reply. */
static CUresult take_results(struct srv_client *c, struct srv_call *k, const struct srv_hook *hook,
                             struct srv_obj *destroyed)
{
    CUresult res;
    if (!k->registers && (res = register_outputs(c, k)) != CUDA_SUCCESS) return res;
    if (hook && hook->after && (res = hook->after(c, k)) != CUDA_SUCCESS) return res;
    if ((res = map_outputs(c, k)) != CUDA_SUCCESS) return res;
    if (destroyed && !k->keep) srv_obj_destroyed(c, destroyed);
    copy_strings(k);
    return CUDA_SUCCESS;
}

/* The generic replay of a described call: decoded, checked, run and its results taken. */
static CUresult replay(struct srv_client *c, struct srv_call *k, uint8_t *p, uint32_t len,
                       struct srv_obj **destroyed, struct srv_obj **host)
{
    const struct shim_call *d = k->d;
    const struct srv_hook *hook = srv_call_hooks[k->id];
    int id = k->id;
    int via = d->target && d->cls != SHIM_TWIN ? d->target : 0;
    if ((d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC) || !cif_ok[via ? via : id] ||
        !srv_drv_fns[via ? via : id])
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult res = chan_unpack_call(d, p, len, c->out, CHAN_LANE_DATA, &k->a);
    if (res != CUDA_SUCCESS) return res;
    if ((d->flags & SHIM_CF_CONTEXT) && !c->cur) return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < d->nparams; i++)
        if ((res = check_param(c, k, i, destroyed, host)) != CUDA_SUCCESS) return res;
    if (d->parent >= 0) k->parent = named_obj(c, &d->params[d->parent], k->a.val[d->parent]);
    if ((res = resolve_stream(c, k, via)) != CUDA_SUCCESS) return res;
    /* Device-level calls need no client context, but the driver wants one current: one of
     * the client's devices (a device query, none where that one is not made yet). */
    if (!c->cur && (srv_device_made(srv_dev_any(c)) || !device_query[id]) &&
        (res = srv_use_device(srv_dev_any(c))) != CUDA_SUCCESS)
        return res;
    if ((res = check_limit(c, k)) != CUDA_SUCCESS) return res;
    if (hook && hook->before && (res = hook->before(c, k)) != CUDA_SUCCESS) return res;
    if ((res = run_call(c, k, hook, via, *destroyed)) != CUDA_SUCCESS) return res;
    return take_results(c, k, hook, *destroyed);
}

void srv_generic(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    const struct shim_call *d = &shim_calls[r->op];
    int lane = (r->flags & CHAN_RF_REPLY) ? r->lane : -1;
    struct srv_call k;
    memset(&k, 0, sizeof(k));
    k.id = r->op;
    k.drive = drive;
    k.d = d;
    k.r = r;
    k.dev = c->cur ? c->cur->device : srv_dev_any(c);
    struct srv_obj *destroyed = NULL, *host = NULL;
    CUresult res = replay(c, &k, p, len, &destroyed, &host);
    if (lane < 0) {
        srv_defer(c, res, d->name);
        return;
    }
    /* A failed call sends back outputs only where the driver ran and its description says
     * the driver reports why in them (always-out:); the client takes those alone. */
    uint32_t out = res == CUDA_SUCCESS || k.report ? (uint32_t)k.a.out_len : 0;
    if (out) memcpy(srv_lane_data(c, lane), c->out, out);
    /* Work on host memory completes before the call returns (sync-if-host:). */
    if (res == CUDA_SUCCESS && host && k.stream &&
        (res = srv_wait_stream(c, k.stream, lane, out)) == CUDA_SUCCESS)
        return;
    srv_reply(c, lane, res, out);
}
