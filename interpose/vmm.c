/* Virtual memory management, described in cuda_symbols.txt: mappings enter the client's
 * range mirror from their description (cuMemMap's mapped:ptr[size]); what an unmap or a
 * reservation's free takes away, possibly several mappings at once, leaves it here. */
#include "interpose/shim.h"

/* cuMemUnmap(ptr, size) and cuMemAddressFree(ptr, size): their first two parameters. */
static void unmapped_after(const void *const *argv)
{
    shim_range_drop_within(*(const CUdeviceptr *)argv[0], *(const size_t *)argv[1]);
}

const struct shim_hook shim_hook_vmm_unmapped = {.after = unmapped_after};
