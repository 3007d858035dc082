/* Graphs, their nodes and memory pools in a process moved to its GPUs' servers (conn.c,
 * issue 30). They are no context's objects: natively any context may be current when a graph
 * is cloned, instantiated or destroyed (PyTorch destroys its CUDA graphs with whatever device
 * is current), a node of it named alone (cuGraphNodeGetType), or a pool used. Each lives in the
 * server that made it (a captured graph in its stream's, a node in its graph's), which alone
 * knows it: its handle is kept here with that server's device, and route.c sends the calls
 * naming it there. Nodes are kept as calls return them, alone or in arrays (call.c), with
 * their graph where the call named one, and go with it. Their values are their servers' own: a
 * value two servers both gave (they are pointers of different processes) goes to the later one's,
 * said once. In a process that did not move nothing is kept. Physical memory handles are
 * physical.c's. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <uthash.h>

struct key {
    uint64_t type, value;
};

struct owned {
    struct key k;
    int dev;        /* a device of the server that made it */
    uint64_t owner; /* a node's graph, where known: the node goes with it; else 0 */
    UT_hash_handle hh;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct owned *table; /* under lock */

int shim_owned_kind(uint32_t type)
{
    return type == SHIM_HT_CUgraph || type == SHIM_HT_CUgraphNode || type == SHIM_HT_CUmemoryPool;
}

static int moved(void)
{
    int of;
    return shim_moved_ordinal(&of) >= 0;
}

void shim_owned_made(uint32_t type, uint64_t value, uint64_t owner)
{
    int of, dev = shim_route_device();
    if (!value || !moved()) return;
    if (dev < 0) dev = shim_moved_ordinal(&of); /* shim_conn's device */
    struct key k = {.type = type, .value = value};
    pthread_mutex_lock(&lock);
    struct owned *e = NULL;
    HASH_FIND(hh, table, &k, sizeof(k), e);
    if (e && e->dev != dev) {
        static _Atomic int said;
        if (!atomic_exchange(&said, 1))
            shim_log("a %s value %#llx given by two GPUs' servers of this process: calls naming "
                     "it go to the later one's (said once)",
                     shim_types[type].name, (unsigned long long)value);
    }
    if (!e && (e = calloc(1, sizeof(*e)))) {
        e->k = k;
        HASH_ADD(hh, table, k, sizeof(e->k), e);
    }
    if (e) { /* else not kept: its calls go to the thread's server */
        e->dev = dev;
        e->owner = type == SHIM_HT_CUgraphNode ? owner : 0;
    }
    pthread_mutex_unlock(&lock);
}

void shim_owned_gone(uint32_t type, uint64_t value)
{
    if (!moved()) return;
    struct key k = {.type = type, .value = value};
    pthread_mutex_lock(&lock);
    struct owned *e = NULL;
    HASH_FIND(hh, table, &k, sizeof(k), e);
    if (e) {
        HASH_DEL(table, e);
        free(e);
    }
    /* A graph's nodes go with it: the driver may give their values to other nodes. */
    struct owned *n, *next;
    if (type == SHIM_HT_CUgraph) {
        HASH_ITER(hh, table, n, next) {
            if (n->k.type == SHIM_HT_CUgraphNode && n->owner == value) {
                HASH_DEL(table, n);
                free(n);
            }
        }
    }
    pthread_mutex_unlock(&lock);
}

int shim_owned_device(uint32_t type, uint64_t value, int *dev)
{
    if (!moved()) return 0;
    struct key k = {.type = type, .value = value};
    pthread_mutex_lock(&lock);
    struct owned *e = NULL;
    HASH_FIND(hh, table, &k, sizeof(k), e);
    if (e) *dev = e->dev;
    pthread_mutex_unlock(&lock);
    return e != NULL;
}
