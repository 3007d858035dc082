/* Generic call marshalling; see marshal.h for the format. */
#include "channel/marshal.h"

#include <string.h>

#define PAD8(x) (((x) + 7u) & ~(size_t)7u)

static int is_value(uint8_t kind)
{
    return kind == SHIM_PK_VAL || kind == SHIM_PK_HANDLE || kind == SHIM_PK_DPTR ||
           kind == SHIM_PK_RAW;
}

/* Reads an unsigned integer of `size` bytes from p. */
static uint64_t read_uint(const void *p, size_t size)
{
    switch (size) {
    case 1: return *(const uint8_t *)p;
    case 2: return *(const uint16_t *)p;
    case 4: return *(const uint32_t *)p;
    default: return *(const uint64_t *)p;
    }
}

/* Element count of pointer parameter i, computed from the caller's arguments. */
static int count_of(const struct shim_call *d, const void *const *argv, int i, uint64_t *n)
{
    const struct shim_param *p = &d->params[i];
    switch (p->ckind) {
    case SHIM_CK_ONE: *n = 1; return 0;
    case SHIM_CK_FIXED: *n = p->count_fixed; return 0;
    case SHIM_CK_ARG:
        *n = read_uint(argv[p->count_arg], d->params[p->count_arg].size);
        return 0;
    case SHIM_CK_DEREF: {
        const void *cp = *(const void *const *)argv[p->count_arg];
        if (!cp)
            return -1;
        *n = read_uint(cp, d->params[p->count_arg].elem);
        return 0;
    }
    }
    return -1;
}

size_t chan_pack_call(const struct shim_call *d, const void *const *argv, uint8_t *buf,
                      size_t cap, size_t *reply_len, CUresult *err)
{
    size_t off = 0, rlen = 0;
    *err = CUDA_SUCCESS;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (off + 8 > cap)
            goto toolarge;
        if (is_value(p->kind)) {
            uint64_t v = 0;
            memcpy(&v, argv[i], p->size);
            if (buf)
                memcpy(buf + off, &v, 8);
            off += 8;
            continue;
        }
        const void *ptr = *(const void *const *)argv[i];
        uint32_t hdr[2] = {ptr != NULL, 0};
        if (p->kind == SHIM_PK_STR) {
            size_t n = ptr ? strlen(ptr) + 1 : 0;
            if (n > UINT32_MAX || off + 8 + PAD8(n) > cap)
                goto toolarge;
            hdr[1] = (uint32_t)n;
            if (buf) {
                memcpy(buf + off, hdr, 8);
                memcpy(buf + off + 8, ptr, n);
            }
            off += 8 + PAD8(n);
            continue;
        }
        uint64_t n = 0;
        if (ptr && count_of(d, argv, i, &n) != 0) {
            *err = CUDA_ERROR_INVALID_VALUE;
            return 0;
        }
        uint64_t bytes = n * p->elem;
        if (n > UINT32_MAX || (p->elem && bytes / p->elem != n))
            goto toolarge;
        hdr[1] = (uint32_t)n;
        if (buf)
            memcpy(buf + off, hdr, 8);
        off += 8;
        if (ptr && (p->kind == SHIM_PK_IN || p->kind == SHIM_PK_INOUT)) {
            if (off + PAD8(bytes) > cap)
                goto toolarge;
            if (buf)
                memcpy(buf + off, ptr, bytes);
            off += PAD8(bytes);
        }
        if (ptr && (p->kind == SHIM_PK_OUT || p->kind == SHIM_PK_INOUT))
            rlen += PAD8(bytes);
    }
    *reply_len = rlen;
    return off;
toolarge:
    /* The generic path carries calls of bounded size only; larger ones are hand-written. */
    *err = CUDA_ERROR_INVALID_VALUE;
    return 0;
}

void chan_unpack_reply(const struct shim_call *d, const void *const *argv, const uint8_t *reply,
                       size_t len)
{
    /* Counts first: an INOUT count parameter is overwritten by the reply, but the layout
     * was sized by its entry value. */
    uint64_t n[CHAN_MAX_ARGS] = {0};
    for (int i = 0; i < d->nparams && i < CHAN_MAX_ARGS; i++) {
        const struct shim_param *p = &d->params[i];
        if ((p->kind == SHIM_PK_OUT || p->kind == SHIM_PK_INOUT) && *(void *const *)argv[i] &&
            count_of(d, argv, i, &n[i]) != 0)
            n[i] = 0;
    }
    size_t off = 0;
    for (int i = 0; i < d->nparams && i < CHAN_MAX_ARGS; i++) {
        const struct shim_param *p = &d->params[i];
        void *ptr = *(void *const *)argv[i];
        if ((p->kind != SHIM_PK_OUT && p->kind != SHIM_PK_INOUT) || !ptr)
            continue;
        size_t bytes = n[i] * p->elem;
        if (off + bytes > len)
            return;
        memcpy(ptr, reply + off, bytes);
        off += PAD8(bytes);
    }
}

CUresult chan_unpack_call(const struct shim_call *d, uint8_t *payload, size_t len, uint8_t *out,
                          size_t cap, struct chan_args *a)
{
    size_t off = 0, ooff = 0;
    if (d->nparams > CHAN_MAX_ARGS)
        return CUDA_ERROR_NOT_SUPPORTED;
    memset(a, 0, sizeof(*a));
    a->out = out;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (off + 8 > len)
            return CUDA_ERROR_INVALID_VALUE;
        if (is_value(p->kind)) {
            memcpy(&a->val[i], payload + off, 8);
            off += 8;
            continue;
        }
        uint32_t hdr[2];
        memcpy(hdr, payload + off, 8);
        off += 8;
        if (!hdr[0]) {
            a->ptr[i] = NULL;
            continue;
        }
        uint64_t bytes = (uint64_t)hdr[1] * (p->kind == SHIM_PK_STR ? 1 : p->elem);
        if (p->kind == SHIM_PK_STR) {
            if (hdr[1] == 0 || off + PAD8(bytes) > len || payload[off + bytes - 1] != '\0')
                return CUDA_ERROR_INVALID_VALUE;
            a->ptr[i] = payload + off;
            off += PAD8(bytes);
            continue;
        }
        a->count[i] = hdr[1];
        if (p->kind == SHIM_PK_IN) {
            if (off + PAD8(bytes) > len)
                return CUDA_ERROR_INVALID_VALUE;
            a->ptr[i] = payload + off;
            off += PAD8(bytes);
            continue;
        }
        /* OUT / INOUT: a zeroed buffer in the reply area. */
        if (ooff + PAD8(bytes) > cap)
            return CUDA_ERROR_INVALID_VALUE;
        a->out_off[i] = ooff;
        a->ptr[i] = out + ooff;
        memset(out + ooff, 0, PAD8(bytes));
        if (p->kind == SHIM_PK_INOUT) {
            if (off + PAD8(bytes) > len)
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(out + ooff, payload + off, bytes);
            off += PAD8(bytes);
        }
        ooff += PAD8(bytes);
    }
    /* DEREF counts must match the entry value the request carried. */
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (is_value(p->kind) || p->kind == SHIM_PK_STR || !a->ptr[i])
            continue;
        uint64_t want;
        switch (p->ckind) {
        case SHIM_CK_ONE: want = 1; break;
        case SHIM_CK_FIXED: want = p->count_fixed; break;
        case SHIM_CK_ARG: want = a->val[p->count_arg]; break;
        default: {
            const void *cp = a->ptr[p->count_arg];
            if (!cp)
                return CUDA_ERROR_INVALID_VALUE;
            want = read_uint(cp, d->params[p->count_arg].elem);
        }
        }
        if (want != a->count[i])
            return CUDA_ERROR_INVALID_VALUE;
    }
    a->out_len = ooff;
    return CUDA_SUCCESS;
}
