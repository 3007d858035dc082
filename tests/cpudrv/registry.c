// The table of live handles. A handle is valid only while it is in this table, so any
// value a caller passes can be checked without dereferencing it.
#include "cpudrv.h"

#define NBUCKETS 65536u

// Both protected by cpudrv_big.
static struct cpudrv_obj *buckets[NBUCKETS];
static struct cpudrv_obj *all_head;

static unsigned bucket_of(const void *h)
{
    uint64_t x = (uint64_t)(uintptr_t)h;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15ull;
    return (unsigned)(x >> 48) & (NBUCKETS - 1);
}

// All below: cpudrv_big held.
// Starts an object with one reference (the caller's), not yet visible as a handle.
void cpudrv_obj_init(struct cpudrv_obj *o, int kind, struct cpudrv_ctx *ctx,
                     void (*release)(struct cpudrv_obj *))
{
    o->kind = kind;
    o->refs = 1;
    o->live = 0;
    o->ctx = ctx;
    o->hnext = NULL;
    o->prev = o->next = NULL;
    o->release = release;
}

// Makes the object a live handle; the handle table takes over the caller's reference.
void cpudrv_obj_publish(struct cpudrv_obj *o)
{
    unsigned b = bucket_of(o);
    o->hnext = buckets[b];
    buckets[b] = o;
    o->prev = NULL;
    o->next = all_head;
    if (all_head) all_head->prev = o;
    all_head = o;
    o->live = 1;
}

// The live object of that kind whose handle is h, or NULL (never dereferences h).
void *cpudrv_obj_find(const void *h, int kind)
{
    if (!h) return NULL;
    for (struct cpudrv_obj *o = buckets[bucket_of(h)]; o; o = o->hnext)
        if ((const void *)o == h) return o->kind == kind ? o : NULL;
    return NULL;
}

// Ends the handle's life: removes it from the table and drops the table's reference.
void cpudrv_obj_unpublish(struct cpudrv_obj *o)
{
    if (!o->live) return;
    struct cpudrv_obj **pp = &buckets[bucket_of(o)];
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp) *pp = o->hnext;
    if (o->prev)
        o->prev->next = o->next;
    else
        all_head = o->next;
    if (o->next) o->next->prev = o->prev;
    o->live = 0;
    o->hnext = o->prev = o->next = NULL;
    cpudrv_obj_put(o);
}

// Takes one more reference.
void cpudrv_obj_ref(struct cpudrv_obj *o)
{
    o->refs++;
}

// Drops one reference; the last one calls o->release.
void cpudrv_obj_put(struct cpudrv_obj *o)
{
    if (--o->refs == 0 && o->release) o->release(o);
}

// Collects up to max live objects of a kind (0 = any) owned by ctx (NULL = any), each
// with a reference taken; returns how many exist (may exceed max).
size_t cpudrv_obj_collect(int kind, struct cpudrv_ctx *ctx, struct cpudrv_obj **out, size_t max)
{
    size_t n = 0;
    for (struct cpudrv_obj *o = all_head; o; o = o->next) {
        if ((kind && o->kind != kind) || (ctx && o->ctx != ctx)) continue;
        if (n < max) {
            out[n] = o;
            o->refs++;
        }
        n++;
    }
    return n;
}
