/* The client's mirror of its own memory ranges (sorted, binary-searched). The server's
 * tables are authoritative; this lets the client classify copy sides and refuse bad
 * addresses at once, as the real driver does, without a round trip. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>

/* Guarded by ranges_lock: sorted by base, non-overlapping. */
static pthread_rwlock_t ranges_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct shim_range *ranges;
static size_t nranges, capranges;

/* Index of the first range with base > addr. */
static size_t upper(uint64_t addr)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void shim_range_add(const struct shim_range *r)
{
    pthread_rwlock_wrlock(&ranges_lock);
    if (nranges == capranges) {
        size_t ncap = capranges ? capranges * 2 : 256;
        struct shim_range *n = realloc(ranges, ncap * sizeof(*n));
        if (!n) {
            /* Without the mirror the server still checks; copies then go staged. */
            pthread_rwlock_unlock(&ranges_lock);
            return;
        }
        ranges = n;
        capranges = ncap;
    }
    size_t i = upper(r->base);
    memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof(*ranges));
    ranges[i] = *r;
    nranges++;
    pthread_rwlock_unlock(&ranges_lock);
}

int shim_range_remove(uint64_t base, struct shim_range *removed)
{
    int found = -1;
    pthread_rwlock_wrlock(&ranges_lock);
    size_t i = upper(base);
    if (i > 0 && ranges[i - 1].base == base) {
        if (removed)
            *removed = ranges[i - 1];
        memmove(&ranges[i - 1], &ranges[i], (nranges - i) * sizeof(*ranges));
        nranges--;
        found = 0;
    }
    pthread_rwlock_unlock(&ranges_lock);
    return found;
}

int shim_range_find(uint64_t addr, uint64_t len, struct shim_range *out)
{
    int found = -1;
    pthread_rwlock_rdlock(&ranges_lock);
    size_t i = upper(addr);
    if (i > 0) {
        const struct shim_range *r = &ranges[i - 1];
        if (addr - r->base < r->size && len <= r->size - (addr - r->base)) {
            if (out)
                *out = *r;
            found = 0;
        }
    }
    pthread_rwlock_unlock(&ranges_lock);
    return found;
}

void shim_range_drop(uint32_t ctx, uint64_t owner, void (*fn)(const struct shim_range *))
{
    pthread_rwlock_wrlock(&ranges_lock);
    size_t j = 0;
    for (size_t i = 0; i < nranges; i++) {
        const struct shim_range *r = &ranges[i];
        int drop = (ctx == 0 || r->ctx == ctx) && (owner == 0 || r->owner == owner);
        if (drop && fn)
            fn(r);
        if (!drop)
            ranges[j++] = *r;
    }
    nranges = j;
    pthread_rwlock_unlock(&ranges_lock);
}
