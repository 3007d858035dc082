// cuGetProcAddress as the 580 driver answers it (gen/data/procaddress-*.tsv, compiled in:
// build/gen/shim_procaddr.c), handing out this library's own exported functions.
//
// MPSSHIM_CPUDRV_PROCADDR=NAME:FROM:TO makes it answer differently from that table, as
// another driver would: NAME's answer that holds from version FROM holds from TO instead
// (every flags), so that a test can tell which driver a client's answers came from.
#include "cpudrv.h"
#include "cpudrv_exports.h"
#include "channel/procaddr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

struct knob {
    char name[128];
    int from, to;
};

static struct knob knob;

static void read_knob(void)
{
    const char *e = getenv("MPSSHIM_CPUDRV_PROCADDR");
    if (!e || sscanf(e, "%127[A-Za-z0-9_]:%d:%d", knob.name, &knob.from, &knob.to) != 3)
        knob.name[0] = '\0';
}

static void *own_function(const char *name)
{
    size_t lo = 0, hi = cpudrv_nexports;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(cpudrv_exports[mid].name, name);
        if (c == 0) return cpudrv_exports[mid].fn;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn) return TR(CUDA_ERROR_INVALID_VALUE);
    *pfn = NULL;
    int key = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? 2
              : flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM           ? 1
                                                                    : 0;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_knob);
    const struct knob *k = &knob;
    int moved = strcmp(k->name, symbol) == 0;
    // The rows of (symbol, key) are contiguous (sorted by name, flags, version): the one
    // that answers holds from the highest version not above cudaVersion.
    size_t lo = 0, hi = shim_nprocaddr_rows;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct shim_procaddr_row *r = &shim_procaddr_rows[mid];
        int c = strcmp(r->name, symbol);
        if (c < 0 || (c == 0 && r->flags < key))
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct shim_procaddr_row *best = NULL;
    int best_from = 0;
    for (size_t i = lo; i < shim_nprocaddr_rows; i++) {
        const struct shim_procaddr_row *r = &shim_procaddr_rows[i];
        if (r->flags != key || strcmp(r->name, symbol) != 0) break;
        int from = moved && r->version == k->from ? k->to : r->version;
        if (from <= cudaVersion && (!best || from > best_from)) {
            best = r;
            best_from = from;
        }
    }
    if (!best) {
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return TR(CUDA_ERROR_NOT_FOUND);
    }
    if (!best->symbol) {
        if (status && best->status >= 0) *status = (CUdriverProcAddressQueryResult)best->status;
        return TR((CUresult)best->result);
    }
    void *fn = own_function(best->symbol);
    if (!fn) {
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return TR(CUDA_ERROR_NOT_FOUND);
    }
    *pfn = fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return TR(CUDA_SUCCESS);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
