/* Virtual memory management, described in cuda_symbols.txt: mappings enter the client's
 * range mirror from their description (cuMemMap's mapped:ptr[size]); what an unmap or a
 * reservation's free takes away, possibly several mappings at once, leaves it here. */
#include "interpose/shim.h"

/* cuMemUnmap(ptr, size) and cuMemAddressFree(ptr, size): their first two parameters. The
 * mappings' mirrors in another GPU's server go too (mirror.c): the physical memory they hold
 * is given back once they are closed. */
static void unmapped_after(const void *const *argv)
{
    CUdeviceptr p = *(const CUdeviceptr *)argv[0];
    size_t n = *(const size_t *)argv[1];
    shim_range_drop_within(p, n);
    shim_mirror_unmapped(p, n);
}

const struct shim_hook shim_hook_vmm_unmapped = {.after = unmapped_after};
