/* Sorted range table; see ranges.h. */
#include "channel/ranges.h"

#include <stdlib.h>
#include <string.h>

static const struct chan_range *at(const struct chan_ranges *t, size_t i)
{
    return (const struct chan_range *)(t->v + i * t->elem);
}

/* Index of the first element with base > addr. */
static size_t upper(const struct chan_ranges *t, uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (at(t, mid)->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* [base, base + size) as an end address, or 0 when it wraps past 2^64. */
static int end_of(uint64_t base, uint64_t size, uint64_t *end)
{
    return __builtin_add_overflow(base, size, end) ? -1 : 0;
}

int chan_ranges_add(struct chan_ranges *t, const void *e)
{
    const struct chan_range *r = e;
    uint64_t end;
    if (end_of(r->base, r->size, &end) != 0) return -1;
    size_t i = upper(t, r->base);
    /* The previous one must end at or before us, the next one start at or after our end. */
    if (i > 0) {
        const struct chan_range *p = at(t, i - 1);
        if (p->base == r->base || p->base + p->size > r->base) return -1;
    }
    if (i < t->n && at(t, i)->base < end) return -1;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        uint8_t *nv = realloc(t->v, ncap * t->elem);
        if (!nv) return -1;
        t->v = nv;
        t->cap = ncap;
    }
    memmove(t->v + (i + 1) * t->elem, t->v + i * t->elem, (t->n - i) * t->elem);
    memcpy(t->v + i * t->elem, e, t->elem);
    t->n++;
    return 0;
}

void *chan_ranges_find(const struct chan_ranges *t, uint64_t addr, uint64_t len)
{
    size_t i = upper(t, addr);
    if (i == 0) return NULL;
    const struct chan_range *r = at(t, i - 1);
    uint64_t off = addr - r->base; /* addr >= base: no wrap */
    if (r->size == 0) return off == 0 && len == 0 ? (void *)r : NULL;
    if (off >= r->size || len > r->size - off) return NULL;
    return (void *)r;
}

void *chan_ranges_cover(const struct chan_ranges *t, uint64_t addr, uint64_t len)
{
    size_t i = upper(t, addr);
    if (i == 0) return NULL;
    const struct chan_range *first = at(t, i - 1), *r = first;
    uint64_t end, rend;
    if (__builtin_add_overflow(addr, len, &end)) return NULL;
    if (first->size == 0) return addr == first->base && len == 0 ? (void *)first : NULL;
    if (addr - first->base >= first->size) return NULL;
    /* Walk on while the span goes past this range and the next one starts where it ends. */
    for (;;) {
        rend = r->base + r->size; /* no wrap: adding it was checked */
        if (end <= rend) return (void *)first;
        if (i >= t->n || at(t, i)->base != rend) return NULL;
        r = at(t, i++);
    }
}

int chan_ranges_remove(struct chan_ranges *t, uint64_t base, void *out)
{
    size_t i = upper(t, base);
    if (i == 0 || at(t, i - 1)->base != base) return -1;
    if (out) memcpy(out, t->v + (i - 1) * t->elem, t->elem);
    memmove(t->v + (i - 1) * t->elem, t->v + i * t->elem, (t->n - i) * t->elem);
    t->n--;
    return 0;
}

void chan_ranges_filter(struct chan_ranges *t, int (*drop)(void *e, void *arg), void *arg)
{
    size_t j = 0;
    for (size_t i = 0; i < t->n; i++) {
        uint8_t *e = t->v + i * t->elem;
        if (drop(e, arg)) continue;
        if (j != i) memcpy(t->v + j * t->elem, e, t->elem);
        j++;
    }
    t->n = j;
}

void chan_ranges_free(struct chan_ranges *t)
{
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}
