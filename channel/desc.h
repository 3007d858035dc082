/* Call descriptors: what both ends know about every driver symbol.
 *
 * gen/gen.py writes one descriptor per symbol of cuda_symbols.txt into the build tree
 * (build/gen/shim_desc.c), as macro calls defined here. The client marshals a generic
 * (`sync`/`async`) call from its descriptor, and the server unmarshals, checks and replays
 * it from the same descriptor, so the two ends cannot disagree about a layout. */
#ifndef MPSSHIM_DESC_H
#define MPSSHIM_DESC_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>
#include <cudaProfiler.h>

#include "shim_ids.h" /* generated: SHIM_ID_*, SHIM_HT_*, SHIM_NCALLS */

/* Class of a symbol, from cuda_symbols.txt. */
enum shim_class {
    SHIM_LOCAL = 1,   /* answered in the client */
    SHIM_SYNC,        /* forwarded from its descriptor; the caller waits for the answer */
    SHIM_ASYNC,       /* forwarded from its descriptor; the caller does not wait */
    SHIM_MANUAL,      /* hand-written marshalling (interpose/ and server/) */
    SHIM_TWIN,        /* another name for the call `target` (version alias, _ptds/_ptsz) */
    SHIM_UNSUPPORTED, /* CUDA_ERROR_NOT_SUPPORTED, logged once */
    SHIM_ABSENT,      /* not exported at all (debugger data symbols) */
};

/* How a parameter travels. */
enum shim_pkind {
    SHIM_PK_VAL = 1, /* scalar (or small struct) by value, copied as is */
    SHIM_PK_HANDLE,  /* opaque handle: checked against the caller's tables by the server */
    SHIM_PK_DPTR,    /* device address: must lie in one of the caller's allocations */
    SHIM_PK_RAW,     /* handle or address passed unchecked (annotated `raw:`) */
    SHIM_PK_IN,      /* pointer to `count` elements the callee reads */
    SHIM_PK_OUT,     /* pointer to `count` elements the callee writes */
    SHIM_PK_INOUT,   /* both */
    SHIM_PK_STR,     /* NUL-terminated input string */
};

/* Where the element count of a pointer parameter comes from. */
enum shim_ckind {
    SHIM_CK_ONE = 0, /* exactly one element */
    SHIM_CK_ARG,     /* the value of scalar parameter `count_arg` */
    SHIM_CK_DEREF,   /* the value `*param[count_arg]` has on entry (an inout count) */
    SHIM_CK_FIXED,   /* the constant `count_fixed` */
};

/* Value class of a by-value parameter, for libffi. */
enum shim_vclass {
    SHIM_VC_S8 = 1,
    SHIM_VC_U8,
    SHIM_VC_S16,
    SHIM_VC_U16,
    SHIM_VC_S32,
    SHIM_VC_U32,
    SHIM_VC_S64,
    SHIM_VC_U64,
    SHIM_VC_F32,
    SHIM_VC_F64,
    SHIM_VC_PTR,
    SHIM_VC_STRUCT, /* passed as bytes; the generator only allows it where the ABI agrees */
};

struct shim_param {
    uint8_t kind;       /* enum shim_pkind */
    uint8_t vclass;     /* enum shim_vclass, for VAL/HANDLE/DPTR/RAW */
    uint8_t ckind;      /* enum shim_ckind, for pointers */
    int8_t count_arg;   /* parameter index for SHIM_CK_ARG / SHIM_CK_DEREF */
    uint16_t size;      /* size of the value itself (pointers: 8) */
    uint16_t htype;     /* SHIM_HT_* of a handle, or of a pointer's handle elements; 0 none */
    uint32_t elem;      /* element size for pointers (1 for void) */
    uint32_t count_fixed;
    uint8_t creates;    /* OUT handle: 1 = a new object the caller owns, 0 = a borrowed one */
};

/* Per-call flags. */
#define SHIM_CF_PTDS 0x1u /* a _ptds/_ptsz entry: the NULL stream means per-thread */

struct shim_call {
    const char *name;
    uint8_t cls;      /* enum shim_class */
    uint8_t nparams;
    uint8_t flags;    /* SHIM_CF_* */
    int8_t destroys;  /* index of the handle parameter a success destroys, or -1 */
    int8_t stream;    /* index of the CUstream parameter an async call enqueues on, or -1 */
    uint16_t target;  /* SHIM_TWIN: the call id it stands for */
    const struct shim_param *params;
};

/* Descriptor table, indexed by SHIM_ID_*. */
extern const struct shim_call shim_calls[SHIM_NCALLS];
/* Handle type names, indexed by SHIM_HT_*. */
extern const char *const shim_htype_names[SHIM_NHTYPES];
/* Call that destroys an owned handle of each type (from `destroys:`), or -1. */
extern const int shim_htype_destroyer[SHIM_NHTYPES];
/* CUresult names from cuda.h, for logs and cuGetErrorName. */
struct shim_errname {
    int code;
    const char *name;
};
extern const struct shim_errname shim_errnames[];
extern const size_t shim_nerrnames;

/* Name of a CUresult ("CUDA_ERROR_INVALID_VALUE"), or NULL when cuda.h has none. */
const char *shim_error_name(CUresult r);

/* ---- macros the generated descriptors are written in ---- */

/* The value class of a type, decided by the compiler. Enums match their underlying integer
 * type; the generator has already refused struct values that are not plain bytes. */
#define SHIM_VCLASS_OF(T)                                                                          \
    (__builtin_classify_type(*(T *)0) == 5                                                         \
         ? SHIM_VC_PTR                                                                             \
         : __builtin_classify_type(*(T *)0) == 12                                                  \
               ? SHIM_VC_STRUCT                                                                    \
               : _Generic(*(T *)0,                                                                 \
                   char: SHIM_VC_S8,                                                               \
                   signed char: SHIM_VC_S8,                                                        \
                   unsigned char: SHIM_VC_U8,                                                      \
                   short: SHIM_VC_S16,                                                             \
                   unsigned short: SHIM_VC_U16,                                                    \
                   int: SHIM_VC_S32,                                                               \
                   unsigned int: SHIM_VC_U32,                                                      \
                   long: SHIM_VC_S64,                                                              \
                   unsigned long: SHIM_VC_U64,                                                     \
                   long long: SHIM_VC_S64,                                                         \
                   unsigned long long: SHIM_VC_U64,                                                \
                   float: SHIM_VC_F32,                                                             \
                   double: SHIM_VC_F64,                                                            \
                   default: SHIM_VC_U32))

#define SHIM_P_VAL(T) {.kind = SHIM_PK_VAL, .vclass = SHIM_VCLASS_OF(T), .size = sizeof(T)}
#define SHIM_P_DPTR(T) {.kind = SHIM_PK_DPTR, .vclass = SHIM_VC_U64, .size = sizeof(T)}
#define SHIM_P_RAW(T) {.kind = SHIM_PK_RAW, .vclass = SHIM_VCLASS_OF(T), .size = sizeof(T)}
#define SHIM_P_HANDLE(T, HT)                                                                       \
    {.kind = SHIM_PK_HANDLE, .vclass = SHIM_VC_PTR, .size = sizeof(T), .htype = HT}
#define SHIM_P_STR() {.kind = SHIM_PK_STR, .vclass = SHIM_VC_PTR, .size = sizeof(void *)}
/* Pointer parameters: element type, handle type of the elements (0 none), count, creates. */
#define SHIM_P_PTR(KIND, T, HT, COUNT, CREATES)                                                    \
    {.kind = KIND,                                                                                 \
     .vclass = SHIM_VC_PTR,                                                                        \
     .size = sizeof(void *),                                                                       \
     .elem = sizeof(T),                                                                            \
     .htype = HT,                                                                                  \
     .creates = CREATES,                                                                           \
     COUNT}
#define SHIM_N_ONE .ckind = SHIM_CK_ONE
#define SHIM_N_ARG(i) .ckind = SHIM_CK_ARG, .count_arg = (i)
#define SHIM_N_DEREF(i) .ckind = SHIM_CK_DEREF, .count_arg = (i)
#define SHIM_N_FIXED(n) .ckind = SHIM_CK_FIXED, .count_fixed = (n)

#define SHIM_CALL(NAME, CLS, PARAMS, FLAGS, DESTROYS, STREAM)                                      \
    [SHIM_ID_##NAME] = {.name = #NAME,                                                             \
                        .cls = CLS,                                                                \
                        .nparams = sizeof(PARAMS) / sizeof(PARAMS[0]),                             \
                        .flags = FLAGS,                                                            \
                        .destroys = DESTROYS,                                                      \
                        .stream = STREAM,                                                          \
                        .params = PARAMS}
#define SHIM_CALL_TWIN(NAME, TARGET, FLAGS)                                                        \
    [SHIM_ID_##NAME] = {.name = #NAME,                                                             \
                        .cls = SHIM_TWIN,                                                          \
                        .flags = FLAGS,                                                            \
                        .destroys = -1,                                                            \
                        .stream = -1,                                                              \
                        .target = SHIM_ID_##TARGET}
#define SHIM_CALL_NOPARAMS(NAME, CLS, FLAGS)                                                       \
    [SHIM_ID_##NAME] = {                                                                           \
        .name = #NAME, .cls = CLS, .flags = FLAGS, .destroys = -1, .stream = -1, .params = NULL}

#endif
