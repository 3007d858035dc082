/* The raw client's payloads mode (tests/unit/rawclient.c): every operation's payload one
 * byte short or long, and each member its %payload line checks made a lie (CHAN_OP_PAYLOADS
 * and CHAN_OP_CHECKED, generated from cuda_symbols.txt by gen/payloads.py). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/rawclient.h"

/* Sends a payload of len bytes of op: 1 when the answer is `answer` (0: the client is
 * disconnected, a protocol error; on a session of its own, which goes). */
static int answered(struct raw_session *x, const char *name, unsigned op, CUresult answer,
                    const void *payload, size_t len, const char *how)
{
    struct raw_session y;
    CUresult got = answer                      ? raw_request(x, op, payload, len, NULL, 0)
                   : raw_session_open(&y) != 0 ? CUDA_SUCCESS
                                               : raw_request(&y, op, payload, len, NULL, 0);
    /* CUDA_ERROR_UNKNOWN: no answer, the server let the client go. */
    CUresult want = answer ? answer : CUDA_ERROR_UNKNOWN;
    printf("%-24s %-28s %zu bytes: %d (want %d)\n", name, how, len, (int)got, (int)want);
    return got == want;
}

/* A payload's checked members (CHAN_OP_CHECKED, from its %payload line), each alone made a
 * lie in a payload whose other members pass: a range's member one past either end, a
 * trailing part's count one more than the record holds and the largest its member holds. */
struct checked {
    unsigned op;
    const char *member;
    size_t size;       /* the fixed part */
    size_t off, width; /* the member */
    uint64_t lo, hi;   /* a range; else elem is the trailing element's size */
    size_t elem;
};

static const struct checked checks[] = {
#define X(op, type, m, l, h)                                                                       \
    {op, #m, sizeof(type), offsetof(type, m), sizeof(((type *)0)->m), (l), (h), 0},
#define Y(op, type, m, size)                                                                       \
    {op, #m, sizeof(type), offsetof(type, m), sizeof(((type *)0)->m), 0, 0, (size)},
    CHAN_OP_CHECKED(X, Y)
#undef X
#undef Y
};

static void put(uint8_t *p, const struct checked *k, uint64_t v)
{
    memcpy(p + k->off, &v, k->width); /* little-endian: the low bytes */
}

/* A payload of op whose checked members all pass, in buf: its length. */
static size_t passing(unsigned op, uint8_t *buf)
{
    size_t len = 0;
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        const struct checked *k = &checks[i];
        if (k->op != op) continue;
        if (!len) len = k->size;
        if (!k->elem) {
            put(buf, k, k->lo);
            continue;
        }
        uint64_t n = 0;
        memcpy(&n, buf + k->off, k->width);
        len += n * k->elem; /* zeros: a string of n > 0 bytes ends in its NUL */
    }
    return len;
}

static int lies(struct raw_session *x, const char *name, unsigned op, CUresult answer, int *n)
{
    static uint8_t buf[8192];
    int bad = 0;
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        const struct checked *k = &checks[i];
        if (k->op != op) continue;
        memset(buf, 0, sizeof(buf));
        size_t len = passing(op, buf);
        uint64_t top = k->width == 8 ? UINT64_MAX : (1ull << (8 * k->width)) - 1, had = 0, v[2];
        int nv = 0;
        memcpy(&had, buf + k->off, k->width);
        if (k->elem) {
            v[nv++] = had + 1;
            v[nv++] = top;
        } else {
            if (k->lo > 0) v[nv++] = k->lo - 1;
            if (k->hi < top) v[nv++] = k->hi + 1;
        }
        for (int j = 0; j < nv; j++, (*n)++) {
            char how[64];
            put(buf, k, v[j]);
            snprintf(how, sizeof(how), "%s = %llu", k->member, (unsigned long long)v[j]);
            bad += !answered(x, name, op, answer, buf, len, how);
        }
    }
    return bad;
}

/* Every operation with a payload row (CHAN_OP_PAYLOADS, generated from the %op rows of
 * cuda_symbols.txt) sent one byte short, and one byte long where the row says its size
 * exactly, then with each member its %payload line checks made a lie: each gets the answer
 * its row names, before its handler runs, and a row whose answer is a protocol error (0) has
 * its client disconnected. */
int raw_payloads(void)
{
    struct raw_session x;
    struct chan_ctx cx = {.id = 1, .device = 0};
    if (raw_session_open(&x) != 0 ||
        raw_request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
        printf("no session\n");
        return 1;
    }
    static const struct {
        const char *name;
        unsigned op;
        size_t size;
        int exact;
        CUresult answer;
    } rows[] = {
#define ROW(op, type, exact, answer) {#op, op, sizeof(type), exact, answer},
        CHAN_OP_PAYLOADS(ROW)
#undef ROW
    };
    static uint8_t zeros[4096];
    int bad = 0, n = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int more = 0; more <= rows[i].exact; more++, n++) {
            size_t len = more ? rows[i].size + 1 : rows[i].size - 1;
            bad += !answered(&x, rows[i].name, rows[i].op, rows[i].answer, zeros, len,
                             more ? "one byte long" : "one byte short");
        }
        bad += lies(&x, rows[i].name, rows[i].op, rows[i].answer, &n);
    }
    printf("%d payloads, %d answered otherwise\n", n, bad);
    return bad != 0 || n == 0;
}
