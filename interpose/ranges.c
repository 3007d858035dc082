/* The client's mirror of its own memory ranges. The server's tables are authoritative;
 * this lets the client classify copy sides and refuse bad addresses at once, as the real
 * driver does, without a round trip. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>

#include "channel/ranges.h"

/* Guarded by ranges_lock: every range the process holds, struct shim_range elements. */
static pthread_rwlock_t ranges_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct chan_ranges ranges = {.elem = sizeof(struct shim_range)};

struct within_args {
    uint64_t base, size;
};

/* The entry overlaps [base, base + size) (compared without computing an end). */
static int overlaps(void *e, void *arg)
{
    const struct shim_range *r = e;
    const struct within_args *a = arg;
    return r->base >= a->base ? r->base - a->base < a->size : a->base - r->base < r->size;
}

void shim_range_add(const struct shim_range *r)
{
    struct within_args a = {.base = r->base, .size = r->size};
    pthread_rwlock_wrlock(&ranges_lock);
    /* What overlaps a range the server has just given this process is stale (the server's
     * table decides, and it gave out nothing overlapping anything live): a record whose
     * memory went without the mirror hearing (graph memory of a graph destroyed since,
     * which keeps no owner here). Left in place, it would keep the new range out, and
     * copies to the new memory would be refused. Looked for only when the add fails (the
     * walk is over every range). Out of memory: without the mirror the server still
     * checks; copies then go staged. */
    if (chan_ranges_add(&ranges, r) != 0 && r->size) {
        chan_ranges_filter(&ranges, overlaps, &a);
        (void)chan_ranges_add(&ranges, r);
    }
    pthread_rwlock_unlock(&ranges_lock);
}

int shim_range_set_flags(uint64_t base, uint32_t flags)
{
    pthread_rwlock_wrlock(&ranges_lock);
    struct shim_range *r = (struct shim_range *)chan_ranges_cover(&ranges, base, 1);
    int found = r && r->base == base;
    if (found) r->flags |= flags;
    pthread_rwlock_unlock(&ranges_lock);
    return found ? 0 : -1;
}

int shim_range_remove(uint64_t base, struct shim_range *removed)
{
    pthread_rwlock_wrlock(&ranges_lock);
    int r = chan_ranges_remove(&ranges, base, removed);
    pthread_rwlock_unlock(&ranges_lock);
    return r;
}

int shim_range_find(uint64_t addr, uint64_t len, struct shim_range *out)
{
    pthread_rwlock_rdlock(&ranges_lock);
    const struct shim_range *r = chan_ranges_cover(&ranges, addr, len);
    if (r && out) *out = *r;
    pthread_rwlock_unlock(&ranges_lock);
    return r ? 0 : -1;
}

struct drop_args {
    uint32_t ctx;
    uint64_t owner;
    void (*fn)(const struct shim_range *);
};

static int dropped(void *e, void *arg)
{
    const struct shim_range *r = e;
    const struct drop_args *a = arg;
    int drop = (a->ctx == 0 || r->ctx == a->ctx) && (a->owner == 0 || r->owner == a->owner);
    if (drop && a->fn) a->fn(r);
    return drop;
}

void shim_range_drop(uint32_t ctx, uint64_t owner, void (*fn)(const struct shim_range *))
{
    struct drop_args a = {.ctx = ctx, .owner = owner, .fn = fn};
    pthread_rwlock_wrlock(&ranges_lock);
    chan_ranges_filter(&ranges, dropped, &a);
    pthread_rwlock_unlock(&ranges_lock);
}

static int inside(void *e, void *arg)
{
    const struct shim_range *r = e;
    const struct within_args *a = arg;
    return r->base >= a->base && r->base - a->base < a->size;
}

void shim_range_drop_within(uint64_t base, uint64_t size)
{
    struct within_args a = {.base = base, .size = size};
    pthread_rwlock_wrlock(&ranges_lock);
    chan_ranges_filter(&ranges, inside, &a);
    pthread_rwlock_unlock(&ranges_lock);
}
