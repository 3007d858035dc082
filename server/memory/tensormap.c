/* Tensor maps (cuTensorMapEncodeTiled, Im2col, Im2colWide, ReplaceAddress): host-side
 * encoders of the driver that write a 128-byte CUtensorMap and do no work in a context. The
 * client has no driver, so the server's encodes them; what a description cannot say is here:
 *
 * - The address a map names is checked over everything its dims and strides reach (the TMA
 *   unit reads no element outside globalDim), as any other span of the caller's memory.
 * - ReplaceAddress gets only the opaque map, whose extent nobody but the driver can read: the
 *   server keeps the extent of every map it handed the client (the last TMAP_KEEP distinct
 *   ones, by their bytes), checks the new address over it, and refuses a map it never made or
 *   has forgotten (INVALID_VALUE, the driver's answer for a bad map).
 * - cuda.h asks for a 64-byte aligned map, but the driver takes one at any address
 *   (580.159.04 on an H200, tests/progs/tensormap.c prints it), and so does the shim; the
 *   server encodes into an aligned buffer of its own all the same. */
#include "server/core/server.h"
#include "server/core/family.h"
#include "server/core/registry.h"

#include <stdlib.h>
#include <string.h>

/* Maps whose extent a client's ReplaceAddress can still name: enough for the descriptors a
 * program keeps per kernel and tensor (each a distinct map), bounded per client. */
#define TMAP_KEEP 256

struct tmap_known {
    uint8_t map[sizeof(CUtensorMap)]; /* bytes: CUtensorMap's alignment would pad each entry */
    uint64_t extent;
};

struct srv_tmaps {
    unsigned n, next; /* entries used; the one the next new map replaces (oldest first) */
    struct tmap_known e[TMAP_KEEP];
};

/* Bytes of one row (dimension 0) of dim0 elements of type dt, or 0 for a type the driver
 * refuses. The packed types hold 16 values per 8 bytes (U4, no gaps) or per 16 bytes
 * (U4 and U6 with gaps), as cuda.h says. */
static uint64_t row_bytes(uint64_t dt, uint64_t dim0)
{
    switch (dt) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
        return dim0;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
        return dim0 * 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
        return dim0 * 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
        return dim0 * 8;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B:
        return (dim0 + 15) / 16 * 8;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
    case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B:
        return (dim0 + 15) / 16 * 16;
    default:
        return 0;
    }
}

/* The bytes from a map's address that its tensor reaches: a row of dimension 0 past the
 * last element's start in every other dimension. 0 on success, -1 for what the driver
 * refuses anyway (rank, type, a dim of 0 or over 2^32, a stride of 2^40 or more) or an
 * extent past 64 bits. dims (rank elements) and strides (rank - 1) are the server's copies. */
static int tmap_extent(uint64_t dt, uint64_t rank, const cuuint64_t *dims,
                       const cuuint64_t *strides, uint64_t *out)
{
    if (rank < 1 || rank > 5 || !dims || (rank > 1 && !strides)) return -1;
    for (uint64_t d = 0; d < rank; d++)
        if (dims[d] == 0 || dims[d] > (1ull << 32)) return -1;
    uint64_t total = row_bytes(dt, dims[0]), step;
    if (!total) return -1;
    for (uint64_t d = 1; d < rank; d++) {
        if (strides[d - 1] >= (1ull << 40) ||
            __builtin_mul_overflow(dims[d] - 1, strides[d - 1], &step) ||
            __builtin_add_overflow(total, step, &total))
            return -1;
    }
    *out = total;
    return 0;
}

static struct tmap_known *tmap_lookup(struct srv_client *c, const void *map)
{
    struct srv_tmaps *t = c->tmaps;
    for (unsigned i = 0; t && i < t->n; i++)
        if (!memcmp(t->e[i].map, map, sizeof(CUtensorMap))) return &t->e[i];
    return NULL;
}

/* Keeps the extent of a map handed to the client (the oldest goes when TMAP_KEEP are kept).
 * Without memory the map is only not known later: its ReplaceAddress is refused. */
static void tmap_keep(struct srv_client *c, const void *map, uint64_t extent)
{
    struct tmap_known *e = tmap_lookup(c, map);
    if (!e) {
        if (!c->tmaps && !(c->tmaps = calloc(1, sizeof(*c->tmaps)))) return;
        struct srv_tmaps *t = c->tmaps;
        e = &t->e[t->next];
        t->next = (t->next + 1) % TMAP_KEEP;
        if (t->n < TMAP_KEEP) t->n++;
        memcpy(e->map, map, sizeof(CUtensorMap));
    }
    e->extent = extent;
}

/* The extent the call's map reaches from its address: from its dims and strides (the
 * encoders), or the one kept for the map it names (ReplaceAddress). */
static CUresult call_extent(struct srv_client *c, struct srv_call *k, uint64_t *extent)
{
    if (k->id == SHIM_ID_cuTensorMapReplaceAddress) {
        const struct tmap_known *e = k->a.ptr[0] ? tmap_lookup(c, k->a.ptr[0]) : NULL;
        if (!e) return CUDA_ERROR_INVALID_VALUE;
        *extent = e->extent;
        return CUDA_SUCCESS;
    }
    /* Every encoder: (map, type, rank, address, globalDim, globalStrides, ...). */
    if (tmap_extent(k->a.val[1], k->a.val[2], k->a.ptr[4], k->a.ptr[5], extent) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The address must lie in the caller's memory over all the map reaches: its parameter is
 * the fourth of an encoder's, ReplaceAddress's second. */
static CUresult tmap_before(struct srv_client *c, struct srv_call *k)
{
    uint64_t extent;
    CUresult r = call_extent(c, k, &extent);
    if (r != CUDA_SUCCESS) return r;
    uint64_t addr = k->a.val[k->id == SHIM_ID_cuTensorMapReplaceAddress ? 1 : 3];
    return srv_range_find(c, addr, extent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The driver's call on an aligned copy of the map (the reply buffer is 8-byte aligned); the
 * map it hands back keeps the extent it was checked over (taken before the call, which
 * rewrites ReplaceAddress's map). */
static CUresult tmap_call(struct srv_client *c, struct srv_call *k)
{
    void *buf = (void *)(uintptr_t)k->vals[0];
    uint64_t extent;
    if (!buf || call_extent(c, k, &extent) != CUDA_SUCCESS) return k->drive(k);
    CUtensorMap m; /* aligned to 128 by its type */
    memcpy(&m, buf, sizeof(m));
    k->vals[0] = (uint64_t)(uintptr_t)&m;
    CUresult r = k->drive(k);
    k->vals[0] = (uint64_t)(uintptr_t)buf;
    memcpy(buf, &m, sizeof(m));
    if (r == CUDA_SUCCESS) tmap_keep(c, buf, extent);
    return r;
}

const struct srv_hook srv_hook_tensormap = {.before = tmap_before, .call = tmap_call};

static void tmaps_free(struct srv_client *c)
{
    free(c->tmaps);
    c->tmaps = NULL;
}

const struct srv_family srv_family_tensormap = {.name = "tensormap", .client_free = tmaps_free};
