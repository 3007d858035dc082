/* Generic call marshalling; see marshal.h for the format. */
#include "channel/marshal.h"

#include <string.h>

#define PAD8(x) (((x) + 7u) & ~(size_t)7u)

static int is_value(uint8_t kind)
{
    return kind == SHIM_PK_VAL || kind == SHIM_PK_HANDLE || kind == SHIM_PK_DPTR ||
           kind == SHIM_PK_RAW || kind == SHIM_PK_CTX;
}

/* Reply room of an OUTREF: its count, then its elements. */
static size_t outref_room(const struct shim_param *p)
{
    return 8 + PAD8((size_t)CHAN_OUTREF_MAX * p->elem);
}

static int is_output(uint8_t kind)
{
    return kind == SHIM_PK_OUT || kind == SHIM_PK_INOUT || kind == SHIM_PK_RANGE;
}

/* Reads an unsigned integer of `size` bytes from p. */
static uint64_t read_uint(const void *p, size_t size)
{
    switch (size) {
    case 1:
        return *(const uint8_t *)p;
    case 2:
        return *(const uint16_t *)p;
    case 4:
        return *(const uint32_t *)p;
    default:
        return *(const uint64_t *)p;
    }
}

void chan_values(const struct shim_call *d, const void *const *argv, uint64_t *val)
{
    for (int i = 0; i < d->nparams && i < CHAN_MAX_ARGS; i++) {
        val[i] = 0;
        if (is_value(d->params[i].kind)) memcpy(&val[i], argv[i], d->params[i].size);
    }
}

static int term(const struct shim_call *d, int i, int deref, const uint64_t *val, void *const *ptr,
                uint64_t *out)
{
    if (i < 0) {
        *out = 1;
        return 0;
    }
    if (i >= d->nparams) return -1;
    if (!deref) {
        *out = val[i];
        return 0;
    }
    if (!ptr[i]) return -1;
    *out = read_uint(ptr[i], d->params[i].elem);
    return 0;
}

int chan_size_eval(const struct shim_call *d, const struct shim_size *z, const uint64_t *val,
                   void *const *ptr, uint64_t *out)
{
    uint64_t a, b;
    if (term(d, z->a, z->deref_a, val, ptr, &a) != 0 ||
        term(d, z->b, z->deref_b, val, ptr, &b) != 0 || __builtin_mul_overflow(a, b, out) ||
        __builtin_mul_overflow(*out, (uint64_t)z->k, out))
        return -1;
    return 0;
}

int chan_span_eval(const struct shim_call *d, const struct shim_span *s, const uint64_t *val,
                   void *const *ptr, uint64_t addr, uint64_t *bytes)
{
    uint64_t w, h = 1, p = 0;
    if (chan_size_eval(d, &s->width, val, ptr, &w) != 0) return -1;
    if (s->dims == 2 && (chan_size_eval(d, &s->height, val, ptr, &h) != 0 ||
                         chan_size_eval(d, &s->pitch, val, ptr, &p) != 0))
        return -1;
    *bytes = 0;
    if (w == 0 || h == 0) return 0; /* nothing is touched */
    if (s->align > 1 && addr % s->align) return -1;
    if (h > 1 && (p < w || (s->align > 1 && p % s->align))) return -1;
    if (__builtin_mul_overflow(h - 1, p, bytes) || __builtin_add_overflow(*bytes, w, bytes))
        return -1;
    return 0;
}

/* The arrays the live SHIM_MK_ARRAY members of n struct elements point to, one after the
 * other at *off (marshal.h): packed into buf (cap bytes; NULL: only sized) from the
 * caller's pointers, or, unpacking (buf the payload, cap its length), the members pointed
 * at their copies there. 0, or -1 for a count past CHAN_NESTED_MAX, a NULL array with
 * elements, or no room. */
static int nested(const struct shim_struct *st, uint8_t *elems, uint64_t n, uint8_t *buf,
                  size_t *off, size_t cap, int unpack)
{
    for (uint64_t e = 0; st && e < n; e++)
        for (uint32_t m = 0; m < st->nmembers; m++) {
            const struct shim_member *mb = &st->members[m];
            uint8_t *el = elems + e * st->size;
            if (mb->kind != SHIM_MK_ARRAY || !shim_member_live(st, mb, el)) continue;
            uint64_t cnt = read_uint(el + mb->count_offset, mb->count_size);
            void *arr;
            memcpy(&arr, el + mb->offset, sizeof(arr));
            size_t bytes = (size_t)cnt * mb->elem;
            if (cnt > CHAN_NESTED_MAX || (cnt && !arr && !unpack) || *off > cap ||
                PAD8(bytes) > cap - *off)
                return -1;
            if (unpack) {
                arr = cnt ? buf + *off : NULL;
                memcpy(el + mb->offset, &arr, sizeof(arr));
            } else if (buf && bytes) {
                memcpy(buf + *off, arr, bytes);
            }
            *off += PAD8(bytes);
        }
    return 0;
}

/* Element count of pointer parameter i, computed from the caller's arguments. */
static int count_of(const struct shim_call *d, const void *const *argv, int i, uint64_t *n)
{
    const struct shim_param *p = &d->params[i];
    switch (p->ckind) {
    case SHIM_CK_ONE:
        *n = 1;
        return 0;
    case SHIM_CK_FIXED:
        *n = p->count_fixed;
        return 0;
    case SHIM_CK_ARG:
        *n = read_uint(argv[p->count_arg], d->params[p->count_arg].size);
        return 0;
    case SHIM_CK_DEREF: {
        const void *cp = *(const void *const *)argv[p->count_arg];
        if (!cp) return -1;
        *n = read_uint(cp, d->params[p->count_arg].elem);
        return 0;
    }
    case SHIM_CK_FN: {
        uint64_t v = 0;
        memcpy(&v, argv[p->count_arg], d->params[p->count_arg].size);
        *n = shim_size_fns[p->count_fixed](v);
        return 0;
    }
    }
    return -1;
}

size_t chan_pack_call(const struct shim_call *d, const void *const *argv, uint8_t *buf, size_t cap,
                      size_t *reply_len, CUresult *err)
{
    size_t off = 0, rlen = 0;
    *err = CUDA_SUCCESS;
    if (d->nparams > CHAN_MAX_ARGS) goto toolarge;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (off + 8 > cap) goto toolarge;
        if (is_value(p->kind)) {
            uint64_t v = 0;
            memcpy(&v, argv[i], p->size);
            if (buf) memcpy(buf + off, &v, 8);
            off += 8;
            continue;
        }
        const void *ptr = *(const void *const *)argv[i];
        uint32_t hdr[2] = {ptr != NULL, 0};
        if (p->kind == SHIM_PK_STR) {
            size_t n = ptr ? strlen(ptr) + 1 : 0;
            if (n > UINT32_MAX || off + 8 + PAD8(n) > cap) goto toolarge;
            hdr[1] = (uint32_t)n;
            if (buf) {
                memcpy(buf + off, hdr, 8);
                memcpy(buf + off + 8, ptr, n);
            }
            off += 8 + PAD8(n);
            continue;
        }
        if (p->kind == SHIM_PK_OUTSTR || p->kind == SHIM_PK_OUTREF) {
            hdr[1] = p->kind == SHIM_PK_OUTSTR;
            if (buf) memcpy(buf + off, hdr, 8);
            off += 8;
            if (ptr) rlen += p->kind == SHIM_PK_OUTSTR ? CHAN_OUTSTR_MAX : outref_room(p);
            continue;
        }
        uint64_t n = 0;
        if (ptr && count_of(d, argv, i, &n) != 0) {
            *err = CUDA_ERROR_INVALID_VALUE;
            return 0;
        }
        uint64_t bytes;
        if (n > UINT32_MAX || __builtin_mul_overflow(n, (uint64_t)p->elem, &bytes)) goto toolarge;
        hdr[1] = (uint32_t)n;
        if (buf) memcpy(buf + off, hdr, 8);
        off += 8;
        if (ptr && (p->kind == SHIM_PK_IN || p->kind == SHIM_PK_INOUT)) {
            if (bytes > cap || off + PAD8(bytes) > cap) goto toolarge;
            if (buf) memcpy(buf + off, ptr, bytes);
            off += PAD8(bytes);
            if (p->kind == SHIM_PK_IN && nested(p->st, (uint8_t *)ptr, n, buf, &off, cap, 0) != 0)
                goto toolarge;
        }
        if (ptr && is_output(p->kind)) {
            if (bytes > cap) goto toolarge;
            rlen += PAD8(bytes);
        }
    }
    *reply_len = rlen;
    return off;
toolarge:
    /* The generic path carries calls of bounded size only; larger ones are hand-written. */
    *err = CUDA_ERROR_INVALID_VALUE;
    return 0;
}

void chan_unpack_reply(const struct shim_call *d, const void *const *argv, const uint8_t *reply,
                       size_t len, const struct chan_keep *keep, unsigned only)
{
    /* Counts first: an INOUT count parameter is overwritten by the reply, but the layout
     * was sized by its entry value. */
    uint64_t n[CHAN_MAX_ARGS] = {0};
    for (int i = 0; i < d->nparams && i < CHAN_MAX_ARGS; i++) {
        const struct shim_param *p = &d->params[i];
        if (is_output(p->kind) && *(void *const *)argv[i] && count_of(d, argv, i, &n[i]) != 0)
            n[i] = 0;
    }
    size_t off = 0;
    for (int i = 0; i < d->nparams && i < CHAN_MAX_ARGS; i++) {
        const struct shim_param *p = &d->params[i];
        if (is_value(p->kind)) continue; /* not a pointer: its argument may be narrower than one */
        void *ptr = *(void *const *)argv[i];
        if (!ptr) continue;
        /* Skipped outputs still take their room in the reply. */
        if (only && !(p->pflags & only)) ptr = NULL;
        if (p->kind == SHIM_PK_OUTSTR) {
            if (!ptr) {
                off += CHAN_OUTSTR_MAX;
                continue;
            }
            if (off + CHAN_OUTSTR_MAX > len) return;
            char text[CHAN_OUTSTR_MAX];
            memcpy(text, reply + off, CHAN_OUTSTR_MAX);
            text[CHAN_OUTSTR_MAX - 1] = '\0';
            *(const char **)ptr = keep ? keep->str(text) : NULL;
            off += CHAN_OUTSTR_MAX;
            continue;
        }
        if (p->kind == SHIM_PK_OUTREF) {
            uint64_t count;
            if (!ptr) {
                off += outref_room(p);
                continue;
            }
            if (off + outref_room(p) > len) return;
            memcpy(&count, reply + off, 8);
            if (count > CHAN_OUTREF_MAX) count = 0;
            *(const void **)ptr =
                count && keep ? keep->array(i, reply + off + 8, count * p->elem) : NULL;
            off += outref_room(p);
            continue;
        }
        if (!is_output(p->kind)) continue;
        size_t bytes = n[i] * p->elem;
        if (off + bytes > len) return;
        if (ptr) memcpy(ptr, reply + off, bytes);
        off += PAD8(bytes);
    }
}

CUresult chan_unpack_call(const struct shim_call *d, uint8_t *payload, size_t len, uint8_t *out,
                          size_t cap, struct chan_args *a)
{
    size_t off = 0, ooff = 0;
    if (d->nparams > CHAN_MAX_ARGS) return CUDA_ERROR_NOT_SUPPORTED;
    memset(a, 0, sizeof(*a));
    a->out = out;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (off + 8 > len) return CUDA_ERROR_INVALID_VALUE;
        if (is_value(p->kind)) {
            memcpy(&a->val[i], payload + off, 8);
            off += 8;
            continue;
        }
        uint32_t hdr[2];
        memcpy(hdr, payload + off, 8);
        off += 8;
        if (!hdr[0]) {
            a->absent[i] = 1;
            a->ptr[i] = NULL;
            if ((d->needed >> i) & 1) {
                /* The server needs this output even so: spare storage, never sent back. */
                a->spare[i] = 0;
                a->ptr[i] = &a->spare[i];
                a->count[i] = 1;
                if (p->elem > sizeof(a->spare[i])) return CUDA_ERROR_INVALID_VALUE;
            }
            continue;
        }
        if (p->kind == SHIM_PK_STR) {
            uint64_t bytes = hdr[1];
            if (hdr[1] == 0 || bytes > len - off || PAD8(bytes) > len - off ||
                payload[off + bytes - 1] != '\0')
                return CUDA_ERROR_INVALID_VALUE;
            a->ptr[i] = payload + off;
            off += PAD8(bytes);
            continue;
        }
        if (p->kind == SHIM_PK_OUTSTR || p->kind == SHIM_PK_OUTREF) {
            size_t room = p->kind == SHIM_PK_OUTSTR ? CHAN_OUTSTR_MAX : outref_room(p);
            if (hdr[1] != (p->kind == SHIM_PK_OUTSTR) || ooff > cap || room > cap - ooff)
                return CUDA_ERROR_INVALID_VALUE;
            a->out_off[i] = ooff;
            memset(out + ooff, 0, room);
            ooff += room;
            a->ptr[i] = &a->spare[i]; /* the driver writes its pointer here */
            a->count[i] = 1;
            continue;
        }
        uint64_t bytes = (uint64_t)hdr[1] * p->elem; /* u32 * u32: cannot overflow */
        a->count[i] = hdr[1];
        if (p->kind == SHIM_PK_IN) {
            if (bytes > len - off || PAD8(bytes) > len - off) return CUDA_ERROR_INVALID_VALUE;
            a->ptr[i] = payload + off;
            off += PAD8(bytes);
            if (nested(p->st, a->ptr[i], hdr[1], payload, &off, len, 1) != 0)
                return CUDA_ERROR_INVALID_VALUE;
            continue;
        }
        /* OUT / INOUT / RANGE: a zeroed buffer in the reply area. */
        if (ooff > cap || bytes > cap - ooff || PAD8(bytes) > cap - ooff)
            return CUDA_ERROR_INVALID_VALUE;
        a->out_off[i] = ooff;
        a->ptr[i] = out + ooff;
        memset(out + ooff, 0, PAD8(bytes));
        if (p->kind == SHIM_PK_INOUT) {
            if (bytes > len - off || PAD8(bytes) > len - off) return CUDA_ERROR_INVALID_VALUE;
            memcpy(out + ooff, payload + off, bytes);
            off += PAD8(bytes);
        }
        ooff += PAD8(bytes);
    }
    /* Counts must be what the arguments the request carried say. */
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (is_value(p->kind) || p->kind == SHIM_PK_STR || p->kind == SHIM_PK_OUTSTR ||
            p->kind == SHIM_PK_OUTREF || a->absent[i])
            continue;
        uint64_t want;
        switch (p->ckind) {
        case SHIM_CK_ONE:
            want = 1;
            break;
        case SHIM_CK_FIXED:
            want = p->count_fixed;
            break;
        case SHIM_CK_ARG:
            want = a->val[p->count_arg];
            break;
        case SHIM_CK_FN:
            want = shim_size_fns[p->count_fixed](a->val[p->count_arg]);
            break;
        default: {
            /* The count is the first element of another pointer argument, which must carry
             * one: a client that sent it with none would have it read past its buffer (the
             * last in the reply area: fuzz_records found it, 2026-11-30). */
            const void *cp = a->ptr[p->count_arg];
            uint32_t elem = d->params[p->count_arg].elem;
            if (!cp || a->absent[p->count_arg] || a->count[p->count_arg] < 1 ||
                (elem != 1 && elem != 2 && elem != 4 && elem != 8))
                return CUDA_ERROR_INVALID_VALUE;
            want = read_uint(cp, elem);
        }
        }
        if (want != a->count[i]) return CUDA_ERROR_INVALID_VALUE;
    }
    a->out_len = ooff;
    return CUDA_SUCCESS;
}
