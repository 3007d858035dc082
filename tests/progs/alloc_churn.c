/* alloc_churn: cuMemAlloc and cuMemFree of many sizes, in a shuffled order, checking that no
 * two live allocations share a byte and that each keeps what was written into it. Whatever
 * serves the allocations (the driver natively; through the shim the driver, or the server's
 * pool or arena, server/memory/devmem.c and server/memory/arena.c, which place small allocations
 * side by side in shared slabs) must give the same answers.
 *
 * Rounds: allocate N blocks of sizes from 1 byte to 3 MiB (mostly small, some across the
 * arena's class and slab boundaries), fill each with its own number (cuMemsetD8 over the
 * whole block: a neighbour that overlaps is overwritten), read every block's first and last
 * byte back; free a shuffled half, allocate that many again (reusing the freed places),
 * check all again; free everything. Also: every address 256-byte aligned, a free of an
 * address inside a block and a second free of one refused. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>

#define N 600

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Mostly small sizes, with the edges of powers of two and a few large ones. */
static size_t pick_size(void)
{
    uint64_t r = next();
    switch (r % 8) {
    case 0:
        return 1 + (size_t)(next() % 64);
    case 1:
    case 2:
        return 1 + (size_t)(next() % 4096);
    case 3: {
        size_t p = (size_t)1 << (9 + next() % 12); /* 512 B .. 1 MiB */
        return p + (size_t)(next() % 3) - 1;       /* just under, at, just over */
    }
    case 4:
        return 1 + (size_t)(next() % (256 << 10));
    case 5:
        return (1 << 20) + (size_t)(next() % (2 << 20)); /* 1 MiB .. 3 MiB */
    default:
        return 1 + (size_t)(next() % 65536);
    }
}

struct blk {
    CUdeviceptr p;
    size_t n;
    unsigned char tag;
};

static void fill(struct blk *b, unsigned char tag)
{
    b->tag = tag;
    CHECK(cuMemsetD8(b->p, tag, b->n));
}

static void check_all(struct blk *v, int n, const char *when)
{
    for (int i = 0; i < n; i++) {
        unsigned char first = 0, last = 0;
        CHECK(cuMemcpyDtoH(&first, v[i].p, 1));
        CHECK(cuMemcpyDtoH(&last, v[i].p + v[i].n - 1, 1));
        REQUIRE(first == v[i].tag && last == v[i].tag,
                "%s: block %d (%zu bytes) holds %u..%u, want %u", when, i, v[i].n, first, last,
                v[i].tag);
    }
}

static void check_apart(struct blk *v, int n, const char *when)
{
    for (int i = 0; i < n; i++) {
        REQUIRE(v[i].p % 256 == 0, "%s: block %d at an address not 256-byte aligned", when, i);
        for (int j = i + 1; j < n; j++)
            REQUIRE(v[i].p + v[i].n <= v[j].p || v[j].p + v[j].n <= v[i].p,
                    "%s: blocks %d and %d overlap", when, i, j);
    }
}

int main(void)
{
    t_init("alloc_churn", 300);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    static struct blk v[N];
    for (int i = 0; i < N; i++) {
        v[i].n = pick_size();
        CHECK(cuMemAlloc(&v[i].p, v[i].n));
        fill(&v[i], (unsigned char)(1 + i % 251));
    }
    check_apart(v, N, "first round");
    check_all(v, N, "first round");
    t_ok("%d allocations of 1 byte to 3 MiB: apart, aligned, each holding its own bytes", N);

    /* A free of an address inside a block, then of one already freed: refused. */
    int big = 0;
    while (v[big].n < 2)
        big++;
    EXPECT_ERR(cuMemFree(v[big].p + 1));
    CUdeviceptr gone = v[big].p;
    CHECK(cuMemFree(gone));
    EXPECT_ERR(cuMemFree(gone));
    v[big].n = pick_size();
    CHECK(cuMemAlloc(&v[big].p, v[big].n));
    fill(&v[big], 7);
    t_ok("a free inside a block and a second free are refused");

    for (int round = 1; round <= 3; round++) {
        int order[N];
        for (int i = 0; i < N; i++)
            order[i] = i;
        for (int i = N - 1; i > 0; i--) {
            int j = (int)(next() % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < N / 2; k++)
            CHECK(cuMemFree(v[order[k]].p));
        for (int k = 0; k < N / 2; k++) {
            struct blk *b = &v[order[k]];
            b->n = pick_size();
            CHECK(cuMemAlloc(&b->p, b->n));
            fill(b, (unsigned char)(1 + (round * 31 + k) % 251));
        }
        char when[32];
        snprintf(when, sizeof(when), "round %d", round);
        check_apart(v, N, when);
        check_all(v, N, when);
        t_ok("round %d: half freed in shuffled order and allocated again, all apart and intact",
             round);
    }
    for (int i = 0; i < N; i++)
        CHECK(cuMemFree(v[i].p));
    t_ok("all freed");
    t_pass();
}
