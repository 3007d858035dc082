/* Size functions of counts written [@name(param)] in cuda_symbols.txt: how many bytes a
 * pointer parameter points to, from the value of another parameter, where the prototype
 * cannot say (a `void *value` whose type depends on an attribute). Both ends run the same
 * function: the client to pack the bytes, the server to check the count it received. */
#include "channel/desc.h"

/* cuMemPoolSetAttribute/GetAttribute: int for the reuse policies, cuuint64_t for the
 * thresholds and counters; 0 for an attribute this header does not know (the driver
 * refuses it, and no byte of the caller's is read or written). */
uint64_t shim_size_mempool_attr(uint64_t attr)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return sizeof(int);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        return sizeof(cuuint64_t);
    default:
        return 0;
    }
}

/* Tensor maps (cuTensorMapEncode*): how many elements each array of a tensor of rank `rank`
 * holds (the counts of the pointers' elements): 0 for a rank the driver refuses (1..5), so
 * that no byte of the caller's is read for it. One per dimension: */
uint64_t shim_size_tmap_dims(uint64_t rank)
{
    return rank >= 1 && rank <= 5 ? rank : 0;
}

/* the strides of every dimension but the first: */
uint64_t shim_size_tmap_strides(uint64_t rank)
{
    return rank >= 1 && rank <= 5 ? rank - 1 : 0;
}

/* an im2col box corner's offsets, one per spatial dimension (rank 3..5: {W}, {H, W}, {D, H, W}). */
uint64_t shim_size_tmap_corners(uint64_t rank)
{
    return rank >= 3 && rank <= 5 ? rank - 2 : 0;
}
