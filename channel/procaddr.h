/* The real driver's cuGetProcAddress answers (generated from gen/data/procaddress-*.tsv
 * into build/gen/shim_procaddr.c): for a name, flags and first CUDA version, the symbol it
 * returns, or the status it fails with. Both ends link the table: the server builds the
 * answers it sends from it (server/code/procaddr.c), the client answers from it when it has no
 * server's (interpose/procaddr.c); the names are the generator's. */
#ifndef MPSSHIM_PROCADDR_H
#define MPSSHIM_PROCADDR_H

#include <stddef.h>

struct shim_procaddr_row {
    const char *name;
    int flags;          /* 0 default, 1 legacy stream, 2 per-thread default stream */
    int version;        /* the answer holds from this cudaVersion on */
    const char *symbol; /* NULL: not found, with result and status below */
    int result;         /* CUresult when symbol is NULL */
    int status;         /* CUdriverProcAddressQueryResult, -1 = not written */
};

extern const struct shim_procaddr_row shim_procaddr_rows[];
extern const size_t shim_nprocaddr_rows;

#endif
