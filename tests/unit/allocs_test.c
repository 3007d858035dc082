/* Unit test of the server's per-client range table (server/allocs.c): lookups by any
 * address inside a range, extents that overrun, removal, and many entries in any order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static int failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(void)
{
    struct srv_client c;
    memset(&c, 0, sizeof(c));
    struct srv_alloc a = {.base = 0x1000, .size = 0x100, .kind = SRV_ALLOC_DEVICE};
    struct srv_alloc b = {.base = 0x2000, .size = 0x1000, .kind = SRV_ALLOC_GLOBAL};
    CHECK(srv_alloc_add(&c, &b) == 0);
    CHECK(srv_alloc_add(&c, &a) == 0);
    CHECK(srv_alloc_find(&c, 0x1000, 1) && srv_alloc_find(&c, 0x1000, 1)->base == 0x1000);
    CHECK(srv_alloc_find(&c, 0x10ff, 1) != NULL);
    CHECK(srv_alloc_find(&c, 0x1100, 1) == NULL); /* one past the end */
    CHECK(srv_alloc_find(&c, 0x10f0, 0x10) != NULL);
    CHECK(srv_alloc_find(&c, 0x10f0, 0x11) == NULL); /* overruns */
    CHECK(srv_alloc_find(&c, 0xfff, 1) == NULL);
    CHECK(srv_alloc_find(&c, 0x2800, 0x800) && srv_alloc_find(&c, 0x2800, 1)->kind == SRV_ALLOC_GLOBAL);
    CHECK(srv_alloc_find(&c, 0x1800, 1) == NULL); /* between the two */
    CHECK(atomic_load(&c.stats.mem_in_use) == 0x100); /* globals do not count */
    struct srv_alloc out;
    CHECK(srv_alloc_remove(&c, 0x1010, &out) != 0); /* only by base */
    CHECK(srv_alloc_remove(&c, 0x1000, &out) == 0 && out.size == 0x100);
    CHECK(srv_alloc_find(&c, 0x1000, 1) == NULL);
    CHECK(atomic_load(&c.stats.mem_in_use) == 0);
    /* Many ranges, inserted in a scrambled order, all found again. */
    for (unsigned i = 0; i < 5000; i++) {
        unsigned k = (i * 2039u) % 5000; /* 2039 is prime to 5000: a permutation */
        struct srv_alloc x = {.base = 0x100000 + (uint64_t)k * 0x200, .size = 0x100,
                              .kind = SRV_ALLOC_DEVICE};
        CHECK(srv_alloc_add(&c, &x) == 0);
    }
    int bad = 0;
    for (unsigned k = 0; k < 5000; k++) {
        struct srv_alloc *f = srv_alloc_find(&c, 0x100000 + (uint64_t)k * 0x200 + 0x80, 0x80);
        bad += !f || f->base != 0x100000 + (uint64_t)k * 0x200;
        bad += srv_alloc_find(&c, 0x100000 + (uint64_t)k * 0x200 + 0x100, 1) != NULL;
    }
    CHECK(bad == 0);
    int unsorted = 0;
    for (size_t i = 1; i < c.nallocs; i++)
        unsorted += c.allocs[i - 1].base >= c.allocs[i].base;
    CHECK(unsorted == 0);
    free(c.allocs);
    if (failures) {
        printf("FAIL allocs_test: %d checks failed\n", failures);
        return 1;
    }
    printf("PASS allocs_test\n");
    return 0;
}
