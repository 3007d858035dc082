/* cuGetProcAddress: the shim answers exactly as the real 580 driver does, from the table of
 * its answers, and always hands out the shim's own entry points. */
#include "interpose/procaddr.h"

#include <string.h>

#include "interpose/shim.h"
#include "interpose/symtab.h"

void *shim_symtab_find(const char *name)
{
    size_t lo = 0, hi = shim_nsymtab;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(shim_symtab[mid].name, name);
        if (c == 0)
            return shim_symtab[mid].fn;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The row that answers (name, flags, version): the last one with row.version <= version. */
static const struct shim_procaddr_row *lookup(const char *name, int flags, int version)
{
    size_t lo = 0, hi = shim_nprocaddr_rows;
    /* First row >= (name, flags). */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct shim_procaddr_row *r = &shim_procaddr_rows[mid];
        int c = strcmp(r->name, name);
        if (c < 0 || (c == 0 && r->flags < flags))
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct shim_procaddr_row *best = NULL;
    for (size_t i = lo; i < shim_nprocaddr_rows; i++) {
        const struct shim_procaddr_row *r = &shim_procaddr_rows[i];
        if (strcmp(r->name, name) != 0 || r->flags != flags || r->version > version)
            break;
        best = r;
    }
    return best;
}

/* Flags value the table is keyed by: the stream-semantics bits only. */
static int flag_key(cuuint64_t flags)
{
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return 2;
    if (flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM)
        return 1;
    return 0;
}

CUresult SHIM_IMPL(cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct shim_procaddr_row *r = lookup(symbol, flag_key(flags), cudaVersion);
    if (!r || !r->symbol) {
        CUresult res = r ? (CUresult)r->result : CUDA_ERROR_NOT_FOUND;
        int st = r ? r->status : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (status && st >= 0)
            *status = (CUdriverProcAddressQueryResult)st;
        return res;
    }
    void *fn = shim_symtab_find(r->symbol);
    if (!fn) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuGetProcAddress)(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
