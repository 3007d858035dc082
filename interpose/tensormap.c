/* Tensor maps, described in cuda_symbols.txt and encoded by the server's driver: the one
 * rule of the driver's about the caller's own buffer is checked here, where its address is
 * known (the server encodes into a buffer of its own, server/memory/tensormap.c). */
#include "interpose/shim.h"

/* The map must be 64-byte aligned (cuda.h), for every encoder and ReplaceAddress (its
 * first parameter). */
static CUresult tensormap_before(const void *const *argv)
{
    const CUtensorMap *map = *(const CUtensorMap *const *)argv[0];
    return (uintptr_t)map % 64 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

const struct shim_hook shim_hook_tensormap = {.before = tensormap_before};
