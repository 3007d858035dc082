/* Macros the generated entry points (build/gen/shim_stubs.c) are written in. */
#ifndef MPSSHIM_STUBS_H
#define MPSSHIM_STUBS_H

#include "interpose/shim.h"

/* Unsupported stubs ignore their arguments by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define SHIM_UNPAREN(...) __VA_ARGS__

/* A sync/async call marshalled from its descriptor: argv holds each parameter's address. */
#define SHIM_GENERIC(NAME, PARAMS, ADDRS)                                                          \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        const void *const argv[] = {SHIM_UNPAREN ADDRS};                                           \
        return shim_forward(SHIM_ID_##NAME, argv);                                                 \
    }
#define SHIM_GENERIC0(NAME)                                                                        \
    CUresult CUDAAPI NAME(void)                                                                    \
    {                                                                                              \
        return shim_forward(SHIM_ID_##NAME, NULL);                                                 \
    }

#define SHIM_UNSUPPORTED(NAME, PARAMS)                                                             \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        return shim_unsupported(SHIM_ID_##NAME);                                                   \
    }
/* Symbols the driver exports but cuda.h does not declare (interop headers, removed ones):
 * callers pass what they pass; these take and read nothing. */
#define SHIM_UNSUPPORTED_NOPROTO(NAME)                                                             \
    CUresult NAME(void);                                                                           \
    CUresult NAME(void)                                                                            \
    {                                                                                              \
        return shim_unsupported(SHIM_ID_##NAME);                                                   \
    }

#endif
