/* CUresult names from the generated table (cuda.h's enum). */
#include "channel/desc.h"

const char *shim_error_name(CUresult r)
{
    size_t lo = 0, hi = shim_nerrnames;
    /* The table is in enum order, which cuda.h keeps ascending. */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (shim_errnames[mid].code == (int)r) return shim_errnames[mid].name;
        if (shim_errnames[mid].code < (int)r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
