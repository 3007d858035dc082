/* The raw client's fuzz mode (tests/unit/rawclient.c): records of random operations and
 * payloads from a seed, over as many sessions as it takes (the server hangs up on protocol
 * errors); the server must survive them. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/unit/rawclient.h"

static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* One session: handshake, a context, then random records until `left` runs out or the
 * server hangs up. Returns the records sent. */
static long fuzz_session(long left)
{
    struct raw_session x;
    if (raw_session_open(&x) != 0) {
        close(x.sock);
        return -1;
    }
    struct chan_wait wt = {.spin_ns = 1000, .alive = raw_before_deadline};
    raw_give_up_at = chan_now_ns() + 2000000000ull;
    long sent = 0;
    /* A context, so that handlers get past their first check. */
    struct chan_rec *r = chan_ring_reserve(&x.c, sizeof(*r) + sizeof(struct chan_ctx), &wt);
    if (r) {
        struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
        r->op = CHAN_OP_CTX_CREATE;
        memcpy(r + 1, &cx, sizeof(cx));
        chan_ring_publish(&x.c, r);
    }
    while (sent < left) {
        char b;
        ssize_t n = recv(x.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) break; /* the server dropped us */
        uint32_t len = (uint32_t)(rnd() % 512);
        if (rnd() % 8 == 0) len = (uint32_t)(rnd() % (CHAN_REC_MAX - sizeof(*r)));
        r = chan_ring_reserve(&x.c, (uint32_t)sizeof(*r) + len, &wt);
        if (!r) break;
        uint64_t pick = rnd();
        r->op = pick % 3 == 0
                    ? (uint16_t)(rnd() % SHIM_NCALLS)
                    : (uint16_t)(CHAN_OP_BASE + 1 + rnd() % (CHAN_OP_END - CHAN_OP_BASE - 1));
        r->flags = (uint16_t)(rnd() % 4);
        r->lane = (uint16_t)(rnd() % (CHAN_NLANES + 2));
        r->thread = (uint16_t)(rnd() % 4);
        r->ctx = rnd() % 4 == 0 ? (uint32_t)rnd() : 1;
        uint8_t *p = (uint8_t *)(r + 1);
        for (uint32_t k = 0; k < len; k++)
            p[k] = (uint8_t)rnd();
        /* Sometimes small integers, which pass more length and range checks. */
        if (rnd() % 2)
            for (uint32_t k = 0; k + 8 <= len; k += 8) {
                uint64_t v = rnd() % 64;
                memcpy(p + k, &v, 8);
            }
        chan_ring_publish(&x.c, r);
        sent++;
    }
    munmap(x.base, x.size);
    close(x.sock);
    return sent;
}

int raw_fuzz(uint64_t seed, long n)
{
    rnd_state = seed ? seed : 1;
    long total = 0;
    int sessions = 0;
    while (total < n) {
        long k = fuzz_session(n - total);
        if (k < 0) {
            fprintf(stderr, "the server refused a session after %ld records: it died?\n", total);
            return 1;
        }
        total += k > 0 ? k : 1;
        sessions++;
    }
    printf("%ld random records in %d sessions\n", total, sessions);
    return 0;
}
