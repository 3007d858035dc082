/* Unit test of the range table both ends use (channel/ranges.c): lookups by any address
 * inside a range, extents that overrun or wrap, overlaps refused, removal, filtering, and
 * many entries in any order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel/ranges.h"

#include "tests/unit/check.h"

struct elem {
    struct chan_range r;
    int tag;
};

static int odd_tag(void *e, void *arg)
{
    (void)arg;
    return ((struct elem *)e)->tag % 2;
}

int main(void)
{
    struct chan_ranges t = {.elem = sizeof(struct elem)};
    struct elem a = {{0x1000, 0x100}, 1}, b = {{0x2000, 0x1000}, 2};
    CHECK(chan_ranges_add(&t, &b) == 0);
    CHECK(chan_ranges_add(&t, &a) == 0);
    struct elem *f = chan_ranges_find(&t, 0x1000, 1);
    CHECK(f && f->tag == 1);
    CHECK(chan_ranges_find(&t, 0x10ff, 1) != NULL);
    CHECK(chan_ranges_find(&t, 0x1100, 1) == NULL); /* one past the end */
    CHECK(chan_ranges_find(&t, 0x10f0, 0x10) != NULL);
    CHECK(chan_ranges_find(&t, 0x10f0, 0x11) == NULL); /* overruns */
    CHECK(chan_ranges_find(&t, 0xfff, 1) == NULL);
    CHECK(chan_ranges_find(&t, 0x10f0, UINT64_MAX) == NULL); /* a span that wraps */
    CHECK(chan_ranges_find(&t, UINT64_MAX, 2) == NULL);
    f = chan_ranges_find(&t, 0x2800, 0x800);
    CHECK(f && f->tag == 2);
    CHECK(chan_ranges_find(&t, 0x1800, 1) == NULL); /* between the two */
    /* Overlapping or wrapping ranges are refused, the table unchanged. */
    struct elem o1 = {{0x10ff, 2}, 9}, o2 = {{0xf00, 0x101}, 9}, o3 = {{0x1000, 1}, 9},
                w = {{UINT64_MAX - 4, 16}, 9};
    CHECK(chan_ranges_add(&t, &o1) != 0 && chan_ranges_add(&t, &o2) != 0);
    CHECK(chan_ranges_add(&t, &o3) != 0 && chan_ranges_add(&t, &w) != 0);
    CHECK(t.n == 2);
    /* A range of size 0 holds only an empty span at its base. */
    struct elem z = {{0x1800, 0}, 4};
    CHECK(chan_ranges_add(&t, &z) == 0);
    CHECK(chan_ranges_find(&t, 0x1800, 0) != NULL && chan_ranges_find(&t, 0x1800, 1) == NULL);
    struct elem out;
    CHECK(chan_ranges_remove(&t, 0x1010, &out) != 0); /* only by base */
    CHECK(chan_ranges_remove(&t, 0x1000, &out) == 0 && out.r.size == 0x100 && out.tag == 1);
    CHECK(chan_ranges_find(&t, 0x1000, 1) == NULL);
    /* Many ranges, inserted in a scrambled order, all found again. */
    for (unsigned i = 0; i < 5000; i++) {
        unsigned k = (i * 2039u) % 5000; /* 2039 is prime to 5000: a permutation */
        struct elem x = {{0x100000 + (uint64_t)k * 0x200, 0x100}, (int)k};
        CHECK(chan_ranges_add(&t, &x) == 0);
    }
    int bad = 0;
    for (unsigned k = 0; k < 5000; k++) {
        struct elem *e = chan_ranges_find(&t, 0x100000 + (uint64_t)k * 0x200 + 0x80, 0x80);
        bad += !e || e->tag != (int)k;
        bad += chan_ranges_find(&t, 0x100000 + (uint64_t)k * 0x200 + 0x100, 1) != NULL;
    }
    CHECK(bad == 0);
    int unsorted = 0;
    for (size_t i = 1; i < t.n; i++)
        unsorted += ((struct elem *)chan_ranges_at(&t, i - 1))->r.base >=
                    ((struct elem *)chan_ranges_at(&t, i))->r.base;
    CHECK(unsorted == 0);
    /* A span may run on through ranges with no gap between them, never across a gap. */
    struct chan_ranges c2 = {.elem = sizeof(struct elem)};
    struct elem p1 = {{0x10000, 0x1000}, 1}, p2 = {{0x11000, 0x1000}, 2},
                p3 = {{0x13000, 0x1000}, 3};
    CHECK(chan_ranges_add(&c2, &p1) == 0 && chan_ranges_add(&c2, &p2) == 0 &&
          chan_ranges_add(&c2, &p3) == 0);
    f = chan_ranges_cover(&c2, 0x10800, 0x1000);
    CHECK(f && f->tag == 1);                                /* across p1|p2 */
    CHECK(chan_ranges_cover(&c2, 0x10000, 0x2000) != NULL); /* p1 and p2 whole */
    CHECK(chan_ranges_cover(&c2, 0x10000, 0x2001) == NULL); /* into the gap */
    CHECK(chan_ranges_cover(&c2, 0x11800, 0x2000) == NULL); /* across the gap */
    CHECK(chan_ranges_cover(&c2, 0x12000, 1) == NULL);      /* in the gap */
    CHECK(chan_ranges_cover(&c2, 0x13000, 0x1000) != NULL);
    CHECK(chan_ranges_cover(&c2, 0x10f00, UINT64_MAX) == NULL); /* wraps */
    CHECK(chan_ranges_find(&c2, 0x10800, 0x1000) == NULL);      /* find: one range only */
    chan_ranges_free(&c2);
    /* Filtering keeps the order and drops exactly the chosen ones. */
    size_t before = t.n;
    chan_ranges_filter(&t, odd_tag, NULL);
    CHECK(t.n == before - 2500); /* tags 1..4999 odd, plus b (2) and z (4) stay */
    bad = 0;
    for (size_t i = 0; i < t.n; i++)
        bad += ((struct elem *)chan_ranges_at(&t, i))->tag % 2;
    CHECK(bad == 0);
    chan_ranges_free(&t);
    if (failures) {
        printf("FAIL ranges_test: %d checks failed\n", failures);
        return 1;
    }
    printf("PASS ranges_test\n");
    return 0;
}
