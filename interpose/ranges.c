/* The client's mirror of its own memory ranges. The server's tables are authoritative;
 * this lets the client classify copy sides and refuse bad addresses at once, as the real
 * driver does, without a round trip. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>

#include "channel/ranges.h"

/* Guarded by ranges_lock: every range the process holds, struct shim_range elements, by the
 * slot of the connection whose server gave it (rpc.c). A process of one connection has all
 * in slot 0. One that holds a connection per GPU's server (route.c) may be given one address
 * by two of them (what their drivers place themselves, module globals say: server/core/zone.c
 * keeps the rest apart), each a range of its own server's: a lookup asks the table of the
 * connection the thread's requests go to first, then the others. */
static pthread_rwlock_t ranges_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct chan_ranges tables[SHIM_CONNS] = {
    [0 ... SHIM_CONNS - 1] = {.elem = sizeof(struct shim_range)}};

/* The slot of the connection a range of context id ctx came from (ctx 0: the thread's
 * route's), as route.c tells (registered as the library loads; the mirror, which every family
 * uses, knows no context); 0 for every range of a process of one connection. Asked before
 * ranges_lock is taken (it may take context.c's lock). */
static int (*ctx_slot)(uint32_t ctx);

void shim_ranges_on_slot(int (*slot_of_ctx)(uint32_t ctx))
{
    ctx_slot = slot_of_ctx;
}

static int slot_of(uint32_t ctx)
{
    if (!atomic_load_explicit(&shim_conns_extra, memory_order_acquire) || !ctx_slot) return 0;
    int s = ctx_slot(ctx);
    return s >= 0 && s < SHIM_CONNS ? s : 0;
}

/* The slots in the order a lookup asks them, the thread's route's first; how many (1 in a
 * process of one connection). */
static int order(int out[SHIM_CONNS])
{
    int n = 0;
    out[n++] = slot_of(0);
    if (!atomic_load_explicit(&shim_conns_extra, memory_order_acquire)) return n;
    for (int s = 0; s < SHIM_CONNS; s++)
        if (s != out[0]) out[n++] = s;
    return n;
}

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
    struct chan_ranges *t = &tables[slot_of(r->ctx)];
    pthread_rwlock_wrlock(&ranges_lock);
    /* What overlaps a range the server has just given this process is stale (the server's
     * table decides, and it gave out nothing overlapping anything live): a record whose
     * memory went without the mirror hearing (graph memory of a graph destroyed since,
     * which keeps no owner here). Left in place, it would keep the new range out, and
     * copies to the new memory would be refused. Looked for only when the add fails (the
     * walk is over every range). Out of memory: without the mirror the server still
     * checks; copies then go staged. */
    if (chan_ranges_add(t, r) != 0 && r->size) {
        chan_ranges_filter(t, overlaps, &a);
        (void)chan_ranges_add(t, r);
    }
    pthread_rwlock_unlock(&ranges_lock);
}

int shim_range_set_flags(uint64_t base, uint32_t flags)
{
    int slots[SHIM_CONNS], found = 0, n = order(slots);
    pthread_rwlock_wrlock(&ranges_lock);
    for (int i = 0; i < n && !found; i++) {
        struct shim_range *r = (struct shim_range *)chan_ranges_cover(&tables[slots[i]], base, 1);
        if ((found = r && r->base == base)) r->flags |= flags;
    }
    pthread_rwlock_unlock(&ranges_lock);
    return found ? 0 : -1;
}

int shim_range_remove(uint64_t base, struct shim_range *removed)
{
    int slots[SHIM_CONNS], r = -1, n = order(slots);
    pthread_rwlock_wrlock(&ranges_lock);
    for (int i = 0; i < n && r != 0; i++)
        r = chan_ranges_remove(&tables[slots[i]], base, removed);
    pthread_rwlock_unlock(&ranges_lock);
    return r;
}

int shim_range_find_here(uint64_t addr, uint64_t len, struct shim_range *out)
{
    struct chan_ranges *t = &tables[slot_of(0)];
    pthread_rwlock_rdlock(&ranges_lock);
    const struct shim_range *r = chan_ranges_cover(t, addr, len);
    if (r && out) *out = *r;
    pthread_rwlock_unlock(&ranges_lock);
    return r ? 0 : -1;
}

int shim_range_find(uint64_t addr, uint64_t len, struct shim_range *out)
{
    int slots[SHIM_CONNS], n = order(slots);
    const struct shim_range *r = NULL;
    pthread_rwlock_rdlock(&ranges_lock);
    for (int i = 0; i < n && !r; i++)
        r = chan_ranges_cover(&tables[slots[i]], addr, len);
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
    for (int s = 0; s < SHIM_CONNS; s++)
        chan_ranges_filter(&tables[s], dropped, &a);
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
    for (int s = 0; s < SHIM_CONNS; s++)
        chan_ranges_filter(&tables[s], inside, &a);
    pthread_rwlock_unlock(&ranges_lock);
}

int shim_range_list(int slot, uint32_t kind, struct shim_range **out)
{
    *out = NULL;
    if (slot < 0 || slot >= SHIM_CONNS) return 0;
    const struct chan_ranges *t = &tables[slot];
    pthread_rwlock_rdlock(&ranges_lock);
    int n = 0;
    struct shim_range *list = t->n ? malloc(t->n * sizeof(*list)) : NULL;
    for (size_t i = 0; list && i < t->n; i++) {
        const struct shim_range *r = (const struct shim_range *)(t->v + i * t->elem);
        if (r->kind == kind) list[n++] = *r;
    }
    pthread_rwlock_unlock(&ranges_lock);
    if (!n) free(list);
    *out = n ? list : NULL;
    return n;
}

int shim_range_slot(uint64_t addr, struct shim_range *out)
{
    int slots[SHIM_CONNS], n = order(slots), found = -1;
    pthread_rwlock_rdlock(&ranges_lock);
    for (int i = 0; i < n && found < 0; i++) {
        const struct shim_range *r = chan_ranges_cover(&tables[slots[i]], addr, 1);
        if (r) {
            *out = *r;
            found = slots[i];
        }
    }
    pthread_rwlock_unlock(&ranges_lock);
    return found;
}
