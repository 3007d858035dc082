/* A sorted table of non-overlapping address ranges, for range lookup by any address inside
 * one: the server's record of each client's memory (server/core/registry.c) and the client's
 * mirror of its own (interpose/ranges.c) are both one of these. Each element starts with a
 * struct chan_range and carries its owner's fields after it (elem bytes in all). The table
 * takes no lock: each user guards it as its own rules say. */
#ifndef MPSSHIM_RANGES_H
#define MPSSHIM_RANGES_H

#include <stddef.h>
#include <stdint.h>

struct chan_range {
    uint64_t base, size;
};

struct chan_ranges {
    uint8_t *v; /* n elements of `elem` bytes, sorted by base */
    size_t n, cap;
    size_t elem; /* set before first use: sizeof the user's element */
};

/* Inserts a copy of `e` (elem bytes starting with its chan_range); 0, or -1 when out of
 * memory or when it would overlap a range already there. */
int chan_ranges_add(struct chan_ranges *t, const void *e);
/* The element whose range holds all of [addr, addr + len), computed without overflow (a
 * span that wraps holds nothing), or NULL. A range of size 0 holds only len 0 at its base.
 * The pointer is valid until the table next changes. */
void *chan_ranges_find(const struct chan_ranges *t, uint64_t addr, uint64_t len);
/* The same, but the span may also run on through ranges that follow each other without a
 * gap (a reservation mapped in pieces is one span to copies and kernels): the element that
 * holds addr, or NULL when any byte of the span lies in no range. */
void *chan_ranges_cover(const struct chan_ranges *t, uint64_t addr, uint64_t len);
/* Removes the element whose range starts exactly at base, copying it to `out` (may be
 * NULL); 0 if found. */
int chan_ranges_remove(struct chan_ranges *t, uint64_t base, void *out);
/* Removes every element for which drop(e, arg) is non-zero, in address order. */
void chan_ranges_filter(struct chan_ranges *t, int (*drop)(void *e, void *arg), void *arg);
/* Element i (0 <= i < n), in address order. */
static inline void *chan_ranges_at(const struct chan_ranges *t, size_t i)
{
    return t->v + i * t->elem;
}
void chan_ranges_free(struct chan_ranges *t);

#endif
