/* Macros the generated entry points (build/gen/shim_stubs.c) are written in.
 *
 * Every entry point first makes sure the process has decided how it runs (through a
 * server, or, when none can be had, straight on the real driver: passthrough.c), then
 * either forwards to the real driver or does the shim's work. */
#ifndef MPSSHIM_STUBS_H
#define MPSSHIM_STUBS_H

#include "interpose/memcpy.h"
#include "interpose/shim.h"

/* Unsupported stubs ignore their arguments by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define SHIM_UNPAREN(...) __VA_ARGS__

/* Forwards the call to the real driver when the process runs without a server. */
#define SHIM_PASS(NAME, ARGS)                                                                      \
    if (__builtin_expect(shim_mode != SHIM_MODE_SERVER, 0) && shim_decide() == SHIM_MODE_REAL)     \
        return ((__typeof__(&NAME))shim_real(SHIM_ID_##NAME))ARGS;

/* A sync/async call marshalled from its descriptor: argv holds each parameter's address. */
#define SHIM_GENERIC(NAME, PARAMS, ADDRS, ARGS)                                                    \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        SHIM_PASS(NAME, ARGS)                                                                      \
        const void *const argv[] = {SHIM_UNPAREN ADDRS};                                           \
        return shim_forward(SHIM_ID_##NAME, argv);                                                 \
    }
#define SHIM_GENERIC0(NAME)                                                                        \
    CUresult CUDAAPI NAME(void)                                                                    \
    {                                                                                              \
        SHIM_PASS(NAME, ())                                                                        \
        return shim_forward(SHIM_ID_##NAME, NULL);                                                 \
    }

/* A hand-written call (interpose/<family>.c defines shim_impl_NAME). */
#define SHIM_ENTRY(NAME, PARAMS, ARGS)                                                             \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        SHIM_PASS(NAME, ARGS)                                                                      \
        return shim_impl_##NAME ARGS;                                                              \
    }

/* A copy (class copy): shim_impl_NAME is one call of the copy engine (interpose/memcpy.h),
 * ENGINE, with the sides, extent and stream the row names (gen/copies.py). */
#define SHIM_COPY_ENTRY(NAME, PARAMS, ARGS, ...)                                                   \
    CUresult shim_impl_##NAME PARAMS                                                               \
    {                                                                                              \
        return __VA_ARGS__;                                                                        \
    }                                                                                              \
    SHIM_ENTRY(NAME, PARAMS, ARGS)

/* A twin (an older version of a call, or its per-thread default stream variant) runs its
 * target's implementation; with PTDS set, the NULL stream of every request the target makes
 * means the calling thread's per-thread default stream. */
#define SHIM_TWIN(NAME, TARGET, PTDS, PARAMS, ARGS)                                                \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        SHIM_PASS(NAME, ARGS)                                                                      \
        if (!(PTDS)) return shim_impl_##TARGET ARGS;                                               \
        unsigned shim_saved_ = shim_ptds_begin();                                                  \
        CUresult shim_r_ = shim_impl_##TARGET ARGS;                                                \
        shim_ptds_end(shim_saved_);                                                                \
        return shim_r_;                                                                            \
    }
#define SHIM_TWIN_GENERIC(NAME, TARGET, PTDS, PARAMS, ADDRS, ARGS)                                 \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        SHIM_PASS(NAME, ARGS)                                                                      \
        const void *const argv[] = {SHIM_UNPAREN ADDRS};                                           \
        if (!(PTDS)) return shim_forward(SHIM_ID_##TARGET, argv);                                  \
        unsigned shim_saved_ = shim_ptds_begin();                                                  \
        CUresult shim_r_ = shim_forward(SHIM_ID_##TARGET, argv);                                   \
        shim_ptds_end(shim_saved_);                                                                \
        return shim_r_;                                                                            \
    }

#define SHIM_UNSUPPORTED(NAME, PARAMS, ARGS)                                                       \
    CUresult CUDAAPI NAME PARAMS                                                                   \
    {                                                                                              \
        SHIM_PASS(NAME, ARGS)                                                                      \
        return shim_unsupported(SHIM_ID_##NAME);                                                   \
    }
/* Symbols the driver exports but cuda.h does not declare (interop headers, removed ones):
 * callers pass what they pass; these take and read nothing, and are refused even without
 * a server (their arguments cannot be forwarded without a prototype). */
#define SHIM_UNSUPPORTED_NOPROTO(NAME)                                                             \
    CUresult NAME(void);                                                                           \
    CUresult NAME(void)                                                                            \
    {                                                                                              \
        return shim_unsupported(SHIM_ID_##NAME);                                                   \
    }

#endif
