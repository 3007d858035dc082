/* CK for the developer's probes of tools/ (heldwait, ctxcost): a driver call that fails ends
 * the probe at once, saying which call and its error (_exit: a probe's other threads may be
 * held in the driver). PROBE_NAME names the probe. */
#ifndef MPSSHIM_TOOLS_CK_H
#define MPSSHIM_TOOLS_CK_H

#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, PROBE_NAME ": %s: error %d\n", #x, (int)r_);                           \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#endif
