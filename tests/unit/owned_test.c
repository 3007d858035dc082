/* Unit test of the graphs, graph nodes and pools a process moved to its GPUs' servers keeps
 * with the device whose server made each (interpose/owned.c), with the route and the move
 * stood in for here: each is kept with the thread's route's device (the process's first GPU's
 * when no route is set), a value a second server gives goes to it (said once), a graph's
 * destruction forgets its nodes and no other graph's, a node's its own, values of other kinds
 * and 0 are never kept, and a process that did not move keeps nothing. */
#include "interpose/shim.h"

#include <string.h>

#include "tests/unit/check.h"

/* ---------------------------------------------------------------- the stand-ins */

const struct shim_type shim_types[SHIM_NHTYPES] = {
    [SHIM_HT_CUgraph] = {.name = "CUgraph"},
    [SHIM_HT_CUgraphNode] = {.name = "CUgraphNode"},
    [SHIM_HT_CUmemoryPool] = {.name = "CUmemoryPool"},
};

static int moved = 1, route_dev = -1; /* -1: no route, the thread's first GPU's server */
static int logged;

int shim_moved_ordinal(int *of)
{
    *of = 2;
    return moved ? 1 : -1; /* moved to device 1's server first */
}

int shim_route_device(void)
{
    return route_dev;
}

void shim_log(const char *fmt, ...)
{
    (void)fmt;
    logged++;
}

/* ---------------------------------------------------------------- the test */

static int dev_of(uint32_t type, uint64_t value)
{
    int dev = -1;
    return shim_owned_device(type, value, &dev) ? dev : -1;
}

static void made_on(int dev, uint32_t type, uint64_t value, uint64_t owner)
{
    route_dev = dev;
    shim_owned_made(type, value, owner);
    route_dev = -1;
}

int main(void)
{
    CHECK(shim_owned_kind(SHIM_HT_CUgraph) && shim_owned_kind(SHIM_HT_CUgraphNode) &&
          shim_owned_kind(SHIM_HT_CUmemoryPool));
    CHECK(!shim_owned_kind(SHIM_HT_CUstream) && !shim_owned_kind(SHIM_HT_CUgraphExec));
    /* Two graphs on two servers, nodes of each; no route: the first GPU's (device 1). */
    made_on(0, SHIM_HT_CUgraph, 0x100, 0);
    shim_owned_made(SHIM_HT_CUgraph, 0x200, 0);
    CHECK(dev_of(SHIM_HT_CUgraph, 0x100) == 0 && dev_of(SHIM_HT_CUgraph, 0x200) == 1);
    made_on(0, SHIM_HT_CUgraphNode, 0x110, 0x100);
    made_on(0, SHIM_HT_CUgraphNode, 0x120, 0x100);
    made_on(1, SHIM_HT_CUgraphNode, 0x210, 0x200);
    made_on(1, SHIM_HT_CUgraphNode, 0x220, 0); /* its graph unknown (a node's dependency) */
    CHECK(dev_of(SHIM_HT_CUgraphNode, 0x110) == 0 && dev_of(SHIM_HT_CUgraphNode, 0x210) == 1);
    /* The same value as another type is another object. */
    CHECK(dev_of(SHIM_HT_CUmemoryPool, 0x110) == -1);
    /* 0 is never kept. */
    made_on(0, SHIM_HT_CUgraphNode, 0, 0x100);
    CHECK(dev_of(SHIM_HT_CUgraphNode, 0) == -1);
    /* A node destroyed alone goes; its graph's other nodes stay. */
    shim_owned_gone(SHIM_HT_CUgraphNode, 0x120);
    CHECK(dev_of(SHIM_HT_CUgraphNode, 0x120) == -1 && dev_of(SHIM_HT_CUgraphNode, 0x110) == 0);
    /* A graph destroyed takes its nodes with it, and no other graph's. */
    shim_owned_gone(SHIM_HT_CUgraph, 0x100);
    CHECK(dev_of(SHIM_HT_CUgraph, 0x100) == -1 && dev_of(SHIM_HT_CUgraphNode, 0x110) == -1);
    CHECK(dev_of(SHIM_HT_CUgraph, 0x200) == 1 && dev_of(SHIM_HT_CUgraphNode, 0x210) == 1 &&
          dev_of(SHIM_HT_CUgraphNode, 0x220) == 1);
    /* A node's value given again by another server, in another graph: it goes there now. */
    made_on(0, SHIM_HT_CUgraphNode, 0x210, 0x300);
    CHECK(dev_of(SHIM_HT_CUgraphNode, 0x210) == 0 && logged == 1);
    shim_owned_gone(SHIM_HT_CUgraph, 0x200); /* not its graph any more */
    CHECK(dev_of(SHIM_HT_CUgraphNode, 0x210) == 0);
    shim_owned_gone(SHIM_HT_CUgraph, 0x300);
    CHECK(dev_of(SHIM_HT_CUgraphNode, 0x210) == -1);
    /* A pool given by two servers: the later one's, the log line said once only. */
    made_on(0, SHIM_HT_CUmemoryPool, 0x400, 0);
    made_on(1, SHIM_HT_CUmemoryPool, 0x400, 0);
    CHECK(dev_of(SHIM_HT_CUmemoryPool, 0x400) == 1 && logged == 1);
    /* A process that did not move keeps nothing and forgets nothing. */
    moved = 0;
    made_on(0, SHIM_HT_CUgraph, 0x500, 0);
    CHECK(dev_of(SHIM_HT_CUgraph, 0x500) == -1);
    moved = 1;
    CHECK(dev_of(SHIM_HT_CUmemoryPool, 0x400) == 1);
    /* A pool destroyed: forgotten. */
    shim_owned_gone(SHIM_HT_CUmemoryPool, 0x400);
    CHECK(dev_of(SHIM_HT_CUmemoryPool, 0x400) == -1);
    if (failures) return 1;
    printf("PASS graphs, nodes and pools kept with their servers, a destroyed pool forgotten\n");
    return 0;
}
