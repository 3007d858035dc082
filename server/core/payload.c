/* The generic checks of the protocol's own payloads, walked from the rules gen/payloads.py
 * writes from each %payload line (srv_payloads.def): a handler reads its trailing parts at
 * the offsets their counts give without checking them again. */
#include "server/core/payload.h"
#include "channel/proto.h"

#include <stddef.h>
#include <string.h>

enum prule_kind {
    PR_KIND_END,
    PR_KIND_RANGE,  /* the member is within [lo, hi] */
    PR_KIND_ARRAY,  /* the member counts elements of `elem` bytes that follow */
    PR_KIND_STRING, /* the member counts bytes that follow, the last a NUL (0: none) */
};

struct srv_prule {
    uint8_t kind;
    uint8_t width; /* bytes of the member: 1, 2, 4 or 8 */
    uint16_t off;  /* offset of the member in the fixed part */
    uint32_t elem;
    uint64_t lo, hi;
};

/* An operation's payload: its fixed part, whether the parts described end the record (else
 * the handler reads more after them), and its rules, in order. */
struct srv_payload {
    uint32_t fixed;
    uint32_t exact;
    const struct srv_prule *rules;
};

#define PR_MEMBER(T, m) sizeof(((T *)0)->m), offsetof(T, m)
#define PR_RANGE(T, m, l, h) {PR_KIND_RANGE, PR_MEMBER(T, m), 0, (l), (h)}
#define PR_ARRAY(T, m, size) {PR_KIND_ARRAY, PR_MEMBER(T, m), (size), 0, 0}
#define PR_STRING(T, m, size) {PR_KIND_STRING, PR_MEMBER(T, m), (size), 0, 0}
#define PR_END {PR_KIND_END, 0, 0, 0, 0, 0}
#include "srv_payloads.def"

/* The unsigned member a rule names, from the fixed part. */
static uint64_t member(const struct srv_prule *r, const uint8_t *p)
{
    uint8_t b1;
    uint16_t b2;
    uint32_t b4;
    uint64_t b8 = 0;
    switch (r->width) {
    case 1:
        memcpy(&b1, p + r->off, 1);
        return b1;
    case 2:
        memcpy(&b2, p + r->off, 2);
        return b2;
    case 4:
        memcpy(&b4, p + r->off, 4);
        return b4;
    default:
        memcpy(&b8, p + r->off, 8);
        return b8;
    }
}

int srv_payload_ok(uint32_t op, const uint8_t *p, uint32_t len)
{
    const struct srv_payload *pl =
        op > CHAN_OP_BASE && op < CHAN_OP_END ? &srv_payloads[op - CHAN_OP_BASE] : NULL;
    if (!pl || !pl->rules) return 1;
    uint64_t end = pl->fixed; /* where the parts described so far end: never past len */
    for (const struct srv_prule *r = pl->rules; r->kind != PR_KIND_END; r++) {
        uint64_t v = member(r, p), bytes;
        switch (r->kind) {
        case PR_KIND_RANGE:
            if (v < r->lo || v > r->hi) return 0;
            break;
        case PR_KIND_ARRAY:
        case PR_KIND_STRING:
            /* The client's count times the element's size, overflow checked, against what is
             * left of the record: nothing of the client's is summed before it fits. */
            if (__builtin_mul_overflow(v, (uint64_t)r->elem, &bytes) || bytes > len - end) return 0;
            end += bytes;
            if (r->kind == PR_KIND_STRING && bytes && p[end - 1] != '\0') return 0;
            break;
        }
    }
    return !pl->exact || end == len;
}
