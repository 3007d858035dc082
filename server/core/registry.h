/* The registry (registry.c): every object a client holds, by handle and by address, and its
 * release. */
#ifndef MPSSHIM_SERVER_REGISTRY_H
#define MPSSHIM_SERVER_REGISTRY_H

#include "server/core/server.h"

/* Records of all clients' objects that exist now (get_server_status's `Objects`). */
uint64_t srv_records_live(void);
/* An element of a client's range table: its range and the object it belongs to. */
struct srv_range {
    struct chan_range r;
    struct srv_obj *obj;
};
/* Prepares the destroyers' call interfaces; 0 on success. */
int srv_registry_init(void);
/* The client's object of that type named `value`, or NULL (also when it is an opened IPC
 * record whose exporter left: see ipc.c). */
struct srv_obj *srv_obj_find(struct srv_client *c, uint32_t type, uint64_t value);
/* The record itself, revoked or not: for letting go of it. */
struct srv_obj *srv_obj_lookup(struct srv_client *c, uint32_t type, uint64_t value);
/* Registers an object: made in the current context (unless its type is context-free) and
 * on the current device, belonging to `parent` (may be NULL). An object already there is
 * returned as it is (owned if either says so). NULL when out of memory. */
struct srv_obj *srv_obj_add(struct srv_client *c, uint32_t type, uint64_t value, int owned,
                            struct srv_obj *parent);
/* Registers a range object [base, base + size); NULL when out of memory or when it
 * overlaps one the client already has. Its bytes are counted with srv_obj_count. */
struct srv_obj *srv_range_add(struct srv_client *c, uint32_t type, uint64_t base, uint64_t size,
                              int owned, struct srv_obj *parent);
/* An opened range [base, base + size) of `type` that the client holds through `held` (its
 * first open, on device dev): the record, or NULL when none can be made, the hold then let go
 * (held->let_go). */
struct srv_obj *srv_range_add_held(struct srv_client *c, uint32_t type, uint64_t base,
                                   uint64_t size, int dev, struct srv_held *held);
/* The client's range object holding addr when all of [addr, addr + len) lies in its
 * ranges (one, or several that follow each other without a gap), or NULL. */
struct srv_obj *srv_range_find(struct srv_client *c, uint64_t addr, uint64_t len);
/* The same for every byte one side of a pitched 3D copy touches (chan_copy_extent's
 * arguments): a copy's side, a graph node's memory. NULL also when the extent overflows. */
struct srv_obj *srv_range_extent(struct srv_client *c, uint64_t base, uint64_t x, uint64_t y,
                                 uint64_t z, uint64_t pitch, uint64_t slice_rows, uint64_t width,
                                 uint64_t height, uint64_t depth);
/* Counts `bytes` of device memory on dev for the object (against the client's limit). */
void srv_obj_count(struct srv_client *c, struct srv_obj *o, int dev, uint64_t bytes);
/* Destroys, as its type's release would, an object the driver just made that could not be
 * registered (out of memory): nothing the server cannot release may stay behind. */
void srv_obj_undo(struct srv_client *c, uint32_t type, uint64_t value, uint64_t size);
/* The client destroyed the object through the API: what dies with it is forgotten, what
 * outlives it stays the client's without a parent; then the record goes. */
void srv_obj_destroyed(struct srv_client *c, struct srv_obj *o);
/* Destroys the object for real if the client owns it (its type's release or destroyer),
 * with everything that belongs to it first, and forgets them all. */
void srv_obj_release(struct srv_client *c, struct srv_obj *o);
/* The client's objects of a type, newest first: for (o = first; o; o = o->type_next). */
static inline struct srv_obj *srv_objs_of(struct srv_client *c, uint32_t type)
{
    return c->by_type[type];
}
/* 1 if v is one of the client's functions; a CUkernel may stand for a CUfunction (CUDA
 * 12+: a kernel launches as the function of the current context). */
int srv_func_known(struct srv_client *c, uint64_t v);
/* Frees everything made in context `ctx` (0 = everything the client has), after its work
 * in that context has finished: one walk, what belongs to an object before the object. */
void srv_release(struct srv_client *c, uint32_t ctx);
void srv_obj_forget_tree(struct srv_client *c, struct srv_obj *o); /* registry.c */
/* Device bytes the client holds on dev: counted in stats.mem_dev[dev] and mem_in_use. */
void srv_mem_count(struct srv_client *c, int dev, uint64_t bytes);
void srv_mem_uncount(struct srv_client *c, int dev, uint64_t bytes);
/* 1 for the kinds of range that are host memory the server maps (pinned, registered and
 * managed memory): the driver sees them as host memory, they outlive a context fault. */
static inline int srv_host_type(uint32_t type)
{
    return type == SHIM_HT_MEM_PINNED || type == SHIM_HT_MEM_MANAGED;
}
/* 1 if o is migrating managed memory (server/memory/migrate.c keeps its block in o->ext):
 * device memory here, whose host view only the client maps at its address. */
static inline int srv_migrating(const struct srv_obj *o)
{
    return o && o->key.type == SHIM_HT_MEM_MANAGED && o->ext != NULL;
}

#endif
