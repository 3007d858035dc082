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
#include <string.h>
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
    SHIM_COPY,        /* a copy: the client's copy engine, the sides its row names */
};

/* How a parameter travels. */
enum shim_pkind {
    SHIM_PK_VAL = 1, /* scalar (or small struct) by value, copied as is */
    SHIM_PK_HANDLE,  /* opaque handle: checked against the caller's objects by the server */
    SHIM_PK_DPTR,    /* device address: its span must lie in the caller's ranges (or, with
                        `creates`, the call makes a range of type `htype` there) */
    SHIM_PK_RAW,     /* handle or address passed unchecked (annotated `raw:`) */
    SHIM_PK_IN,      /* pointer to `count` elements the callee reads */
    SHIM_PK_OUT,     /* pointer to `count` elements the callee writes */
    SHIM_PK_INOUT,   /* both */
    SHIM_PK_STR,     /* NUL-terminated input string */
    SHIM_PK_RANGE,   /* pointer to one device address: the base of a range the call makes */
    SHIM_PK_OUTSTR,  /* const char **: a string the callee returns (travels as text) */
    SHIM_PK_CTX,     /* CUcontext: the client sends its context's id, the server passes the
                        device's real context (NULL stays NULL: the current one) */
    SHIM_PK_OUTREF,  /* const T **: the callee returns a pointer to an array of its own (an
                        output) of *params[count_arg] elements; the elements travel */
};

/* Where the element count of a pointer parameter comes from. */
enum shim_ckind {
    SHIM_CK_ONE = 0, /* exactly one element */
    SHIM_CK_ARG,     /* the value of scalar parameter `count_arg` */
    SHIM_CK_DEREF,   /* the value `*param[count_arg]` has on entry (an inout count) */
    SHIM_CK_FIXED,   /* the constant `count_fixed` */
    SHIM_CK_FN,      /* bytes from size function `count_fixed` (channel/sizes.c) of the
                        value of parameter `count_arg` */
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

/* A size from a call's arguments: k * term(a) * term(b), where term(i) is the value of
 * parameter i, or with deref the value its pointer points to (an output, read after the
 * call); a term of -1 is 1. */
struct shim_size {
    int8_t a, b;
    uint8_t deref_a, deref_b;
    uint32_t k;
};

/* The memory a device address names, and the ranges a call makes: one row of `width`
 * bytes (dims 1), or `height` rows of `width` bytes `pitch` apart (dims 2); the address
 * (and the pitch) must be multiples of `align`. */
struct shim_span {
    struct shim_size pitch, width, height;
    uint8_t dims;
    uint32_t align;
};

/* A member of a struct passed by pointer that is not plain bytes. */
enum shim_mkind {
    SHIM_MK_HANDLE = 1, /* checked against the caller's objects, mapped like a parameter */
    SHIM_MK_NULL,       /* a host pointer or handle that must be NULL (else refused) */
    SHIM_MK_OPAQUE,     /* passed as it is: a value the server never uses as an address, or
                           one the hook of every call that passes the struct checks */
    SHIM_MK_DEVICE,     /* a CUdevice: the client's ordinal, mapped to the server's and back */
    SHIM_MK_LOCATION,   /* a CUmemLocation (at the member's offset): its id, where its type
                           is DEVICE, mapped like a CUdevice */
    SHIM_MK_SPAN,       /* a device address naming `bytes` of the caller's memory, which must
                           lie in its ranges (the server checks it), a multiple of `bytes` (a
                           word the device reads or writes whole) */
    SHIM_MK_CASE,       /* no member: a tagged union's tag value `tag` that the generic path
                           carries; a value no row names is refused */
    SHIM_MK_ARRAY,      /* a pointer to elements of `elem` bytes, as many as the member at
                           count_offset says: they travel after the struct (marshal.h), their
                           members described by `st` (NULL: plain bytes) */
};

struct shim_struct;

struct shim_member {
    const char *name; /* its path in the struct, for messages */
    uint32_t offset;
    uint16_t size;
    uint8_t kind;   /* enum shim_mkind */
    uint16_t htype; /* SHIM_MK_HANDLE: its type */
    uint8_t when;   /* 1: live only where the struct's tag is `tag` (a union member) */
    int32_t tag;    /* SHIM_MK_CASE, and members with `when` */
    uint32_t bytes; /* SHIM_MK_SPAN: how many bytes the address names */
    /* SHIM_MK_ARRAY: where its count lies and its size, its element size and members */
    uint32_t count_offset;
    uint16_t count_size;
    uint32_t elem;
    const struct shim_struct *st;
};

struct shim_struct {
    const char *name;
    uint32_t size; /* sizeof the struct: the element size of arrays of it */
    uint32_t nmembers;
    const struct shim_member *members;
    int32_t tag_offset; /* a tagged union: where its tag (an enum) lies; -1: none */
};

struct shim_param {
    uint8_t kind;         /* enum shim_pkind */
    uint8_t vclass;       /* enum shim_vclass, for VAL/HANDLE/DPTR/RAW */
    uint8_t ckind;        /* enum shim_ckind, for pointers */
    int8_t count_arg;     /* parameter index for SHIM_CK_ARG / SHIM_CK_DEREF */
    uint16_t size;        /* size of the value itself (pointers: 8) */
    uint16_t htype;       /* SHIM_HT_* of a handle, of a pointer's handle elements, of a range */
    uint32_t elem;        /* element size for pointers (1 for void) */
    uint32_t count_fixed; /* SHIM_CK_FIXED: the count; SHIM_CK_FN: the size function */
    uint8_t creates;      /* OUT handle or RANGE: 1 = a new object the caller owns */
    uint8_t after;        /* RANGE: its size is only known from outputs, after the call */
    uint8_t pflags;       /* SHIM_PF_* */
    const struct shim_span *span; /* DPTR: the memory it names; RANGE: its size (width) */
    const struct shim_struct *st; /* IN/OUT/INOUT of structs with members to check */
};

/* Pointer parameter flags. */
#define SHIM_PF_OPTIONAL 0x1u /* IN: NULL is the API's "none", passed on as NULL (opt-in:) */
#define SHIM_PF_ON_ERROR 0x2u /* OUT: written back when the call fails too (always-out:) */
/* A CUdevice, or pointer to CUdevice elements: the client's ordinals, mapped to the server's
 * (in) and back (out). */
#define SHIM_PF_DEVICE 0x4u

/* Per-call flags. */
#define SHIM_CF_PTDS 0x1u         /* a _ptds/_ptsz entry: the NULL stream means per-thread */
#define SHIM_CF_CONTEXT 0x2u      /* makes objects bound to a context: one must be current */
#define SHIM_CF_CONTEXT_FREE 0x4u /* what it makes belongs to no context (ctx-free:) */
#define SHIM_CF_LOADS_CODE 0x8u   /* may load a kernel's or library's code (loads-code:) */

struct shim_call {
    const char *name;
    uint8_t cls; /* enum shim_class */
    uint8_t nparams;
    uint8_t flags;    /* SHIM_CF_* */
    int8_t destroys;  /* index of the handle or range base a success destroys, or -1 */
    int8_t stream;    /* index of the CUstream parameter the call is enqueued on, or -1 */
    int8_t parent;    /* index of the parameter what the call creates belongs to, or -1 */
    int8_t host_sync; /* index of the address that makes the call complete when host memory */
    uint16_t target;  /* SHIM_TWIN: the call it stands for; else the call the server runs
                         instead with the caller's default stream appended (via:), or 0 */
    uint32_t needed;  /* bit i: the server needs output i even when the caller passes NULL */
    const struct shim_param *params;
};

/* Flags of an object type. */
#define SHIM_TF_RANGE 0x1u            /* a kind of memory range, named by its base address */
#define SHIM_TF_COUNTS 0x2u           /* its bytes count against the device memory limit */
#define SHIM_TF_CONTEXT_FREE 0x4u     /* released when the client leaves, not with a context */
#define SHIM_TF_CLIENT 0x8u           /* the client knows them too (refuses bad ones at once) */
#define SHIM_TF_OUTLIVES_PARENT 0x10u /* survives the explicit destruction of its parent */
#define SHIM_TF_RELEASE 0x20u         /* released by hand-written code (srv_release_*) */
#define SHIM_TF_UNMAPPED 0x40u        /* address space, not memory: no span may lie in it */
/* Released on its own before its parent (the driver refuses to destroy the parent while it
 * exists). */
#define SHIM_TF_BEFORE_PARENT 0x80u

/* An object type, from its %handle or %range line. */
struct shim_type {
    const char *name;
    int16_t destroyer; /* call that destroys an owned object when its client leaves, or -1 */
    uint8_t flags;     /* SHIM_TF_* */
    int16_t bad;       /* the CUresult the driver gives for a handle it does not know */
    uint8_t nparents;
    uint16_t parents[8]; /* types an object of this type may belong to (gen.py: MAX_PARENTS) */
};

/* Descriptor table, indexed by SHIM_ID_*. */
extern const struct shim_call shim_calls[SHIM_NCALLS];
/* Object types, indexed by SHIM_HT_*. */
extern const struct shim_type shim_types[SHIM_NHTYPES];
/* Size functions of [@name(param)] counts, indexed by SHIM_SZ_* (channel/sizes.c): bytes,
 * from the value of the parameter named. */
extern uint64_t (*const shim_size_fns[SHIM_NSIZE_FNS + 1])(uint64_t value);
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
// clang-format off: clang-format does not know _Generic and splits its associations
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
// clang-format on

#define SHIM_P_VAL(T) {.kind = SHIM_PK_VAL, .vclass = SHIM_VCLASS_OF(T), .size = sizeof(T)}
#define SHIM_P_DEVICE(T)                                                                           \
    {.kind = SHIM_PK_VAL, .vclass = SHIM_VCLASS_OF(T), .size = sizeof(T), .pflags = SHIM_PF_DEVICE}
#define SHIM_P_DPTR(T, SPAN)                                                                       \
    {.kind = SHIM_PK_DPTR, .vclass = SHIM_VC_U64, .size = sizeof(T), .span = SPAN}
/* A device address at which the call makes a range of type HT, of SPAN's size (cuMemMap). */
#define SHIM_P_MAKES(T, HT, SPAN)                                                                  \
    {.kind = SHIM_PK_DPTR,                                                                         \
     .vclass = SHIM_VC_U64,                                                                        \
     .size = sizeof(T),                                                                            \
     .htype = HT,                                                                                  \
     .creates = 1,                                                                                 \
     .span = SPAN}
#define SHIM_P_RAW(T) {.kind = SHIM_PK_RAW, .vclass = SHIM_VCLASS_OF(T), .size = sizeof(T)}
#define SHIM_P_HANDLE(T, HT)                                                                       \
    {.kind = SHIM_PK_HANDLE, .vclass = SHIM_VCLASS_OF(T), .size = sizeof(T), .htype = HT}
#define SHIM_P_STR() {.kind = SHIM_PK_STR, .vclass = SHIM_VC_PTR, .size = sizeof(void *)}
#define SHIM_P_CTX() {.kind = SHIM_PK_CTX, .vclass = SHIM_VC_PTR, .size = sizeof(CUcontext)}
#define SHIM_P_OUTREF(T, HT, COUNT)                                                                \
    {.kind = SHIM_PK_OUTREF,                                                                       \
     .vclass = SHIM_VC_PTR,                                                                        \
     .size = sizeof(void *),                                                                       \
     .elem = sizeof(T),                                                                            \
     .htype = HT,                                                                                  \
     .ckind = SHIM_CK_DEREF,                                                                       \
     .count_arg = COUNT}
#define SHIM_P_OUTSTR()                                                                            \
    {.kind = SHIM_PK_OUTSTR,                                                                       \
     .vclass = SHIM_VC_PTR,                                                                        \
     .size = sizeof(void *),                                                                       \
     .elem = sizeof(const char *),                                                                 \
     .ckind = SHIM_CK_ONE}
/* A range the call makes: a pointer to its base; SPAN gives its size. */
#define SHIM_P_RANGE(T, HT, SPAN, AFTER)                                                           \
    {.kind = SHIM_PK_RANGE,                                                                        \
     .vclass = SHIM_VC_PTR,                                                                        \
     .size = sizeof(void *),                                                                       \
     .elem = sizeof(T),                                                                            \
     .htype = HT,                                                                                  \
     .ckind = SHIM_CK_ONE,                                                                         \
     .creates = 1,                                                                                 \
     .after = AFTER,                                                                               \
     .span = SPAN}
/* Pointer parameters: element type, handle type of the elements (0 none), count, creates,
 * member table of struct elements (NULL: plain bytes). */
#define SHIM_P_PTR(KIND, T, HT, COUNT, CREATES, ST, PFLAGS)                                        \
    {.kind = KIND,                                                                                 \
     .vclass = SHIM_VC_PTR,                                                                        \
     .size = sizeof(void *),                                                                       \
     .elem = sizeof(T),                                                                            \
     .htype = HT,                                                                                  \
     .creates = CREATES,                                                                           \
     .pflags = PFLAGS,                                                                             \
     .st = ST,                                                                                     \
     COUNT}
#define SHIM_N_ONE .ckind = SHIM_CK_ONE
#define SHIM_N_ARG(i) .ckind = SHIM_CK_ARG, .count_arg = (i)
#define SHIM_N_DEREF(i) .ckind = SHIM_CK_DEREF, .count_arg = (i)
#define SHIM_N_FIXED(n) .ckind = SHIM_CK_FIXED, .count_fixed = (n)
#define SHIM_N_FN(fn, arg) .ckind = SHIM_CK_FN, .count_fixed = (fn), .count_arg = (arg)

#define SHIM_SIZE(A, DA, B, DB, K) {.a = (A), .b = (B), .deref_a = (DA), .deref_b = (DB), .k = (K)}
#define SHIM_SPAN1(BYTES, ALIGN)                                                                   \
    {.width = BYTES,                                                                               \
     .pitch = SHIM_SIZE(-1, 0, -1, 0, 0),                                                          \
     .height = SHIM_SIZE(-1, 0, -1, 0, 1),                                                         \
     .dims = 1,                                                                                    \
     .align = (ALIGN)}
#define SHIM_SPAN2(PITCH, WIDTH, HEIGHT, ALIGN)                                                    \
    {.pitch = PITCH, .width = WIDTH, .height = HEIGHT, .dims = 2, .align = (ALIGN)}

#define SHIM_MEMBER(T, PATH, KIND, HT)                                                             \
    {.name = #PATH,                                                                                \
     .offset = offsetof(T, PATH),                                                                  \
     .size = sizeof(((T *)0)->PATH),                                                               \
     .kind = KIND,                                                                                 \
     .htype = HT}
/* A CUmemLocation member (PATH may be empty: the struct is one), by its whole extent. */
#define SHIM_MEMBER_LOCATION(T, PATH)                                                              \
    {.name = #T "." #PATH,                                                                         \
     .offset = offsetof(T, PATH type) - offsetof(CUmemLocation, type),                             \
     .size = sizeof(CUmemLocation),                                                                \
     .kind = SHIM_MK_LOCATION}
/* A device address member naming BYTES of the caller's memory. */
#define SHIM_MEMBER_SPAN(T, PATH, BYTES)                                                           \
    {.name = #PATH,                                                                                \
     .offset = offsetof(T, PATH),                                                                  \
     .size = sizeof(((T *)0)->PATH),                                                               \
     .kind = SHIM_MK_SPAN,                                                                         \
     .bytes = (BYTES)}
/* A pointer member to COUNT (a member beside it) elements of type E, described by ST. */
#define SHIM_MEMBER_ARRAY(T, PATH, COUNT, E, ST)                                                   \
    {.name = #PATH,                                                                                \
     .offset = offsetof(T, PATH),                                                                  \
     .size = sizeof(((T *)0)->PATH),                                                               \
     .kind = SHIM_MK_ARRAY,                                                                        \
     .count_offset = offsetof(T, COUNT),                                                           \
     .count_size = sizeof(((T *)0)->COUNT),                                                        \
     .elem = sizeof(E),                                                                            \
     .st = ST}
/* Members of a tagged union's case: live only where its tag is V. */
#define SHIM_MEMBER_CASE(V) {.name = #V, .kind = SHIM_MK_CASE, .tag = (V)}
#define SHIM_MEMBER_IF(V, T, PATH, KIND, HT)                                                       \
    {.name = #PATH,                                                                                \
     .offset = offsetof(T, PATH),                                                                  \
     .size = sizeof(((T *)0)->PATH),                                                               \
     .kind = KIND,                                                                                 \
     .htype = HT,                                                                                  \
     .when = 1,                                                                                    \
     .tag = (V)}
#define SHIM_MEMBER_SPAN_IF(V, T, PATH, BYTES)                                                     \
    {.name = #PATH,                                                                                \
     .offset = offsetof(T, PATH),                                                                  \
     .size = sizeof(((T *)0)->PATH),                                                               \
     .kind = SHIM_MK_SPAN,                                                                         \
     .bytes = (BYTES),                                                                             \
     .when = 1,                                                                                    \
     .tag = (V)}
#define SHIM_STRUCT(T, M)                                                                          \
    {.name = #T,                                                                                   \
     .size = sizeof(T),                                                                            \
     .nmembers = sizeof(M) / sizeof(M[0]),                                                         \
     .members = M,                                                                                 \
     .tag_offset = -1}
/* A tagged union: TAG is the member (an enum) whose value says which members are live. */
#define SHIM_UNION(T, TAG, M)                                                                      \
    {.name = #T,                                                                                   \
     .size = sizeof(T),                                                                            \
     .nmembers = sizeof(M) / sizeof(M[0]),                                                         \
     .members = M,                                                                                 \
     .tag_offset = offsetof(T, TAG)}

/* Whether member mb of element el is live: not a case row, and outside a union's cases or
 * in the one el's tag selects. */
static inline int shim_member_live(const struct shim_struct *st, const struct shim_member *mb,
                                   const uint8_t *el)
{
    int32_t tag = 0;
    if (mb->kind == SHIM_MK_CASE) return 0;
    if (!mb->when) return 1;
    memcpy(&tag, el + st->tag_offset, sizeof(tag));
    return tag == mb->tag;
}

/* The element count of array member mb of element el (its count member's value). */
static inline uint64_t chan_member_count(const struct shim_member *mb, const uint8_t *el)
{
    uint64_t n = 0;
    memcpy(&n, el + mb->count_offset, mb->count_size < sizeof(n) ? mb->count_size : sizeof(n));
    return n; /* little-endian: the low bytes */
}

/* Whether element el of st is one the generic path carries: any struct, or a tagged union
 * whose tag a case row names. */
static inline int shim_tag_known(const struct shim_struct *st, const uint8_t *el)
{
    int32_t tag = 0;
    if (st->tag_offset < 0) return 1;
    memcpy(&tag, el + st->tag_offset, sizeof(tag));
    for (uint32_t m = 0; m < st->nmembers; m++)
        if (st->members[m].kind == SHIM_MK_CASE && st->members[m].tag == tag) return 1;
    return 0;
}

#define SHIM_CALL(NAME, CLS, PARAMS, FLAGS, DESTROYS, STREAM, PARENT, HOSTSYNC, VIA, NEEDED)       \
    [SHIM_ID_##NAME] = {.name = #NAME,                                                             \
                        .cls = CLS,                                                                \
                        .nparams = sizeof(PARAMS) / sizeof(PARAMS[0]),                             \
                        .flags = FLAGS,                                                            \
                        .destroys = DESTROYS,                                                      \
                        .stream = STREAM,                                                          \
                        .parent = PARENT,                                                          \
                        .host_sync = HOSTSYNC,                                                     \
                        .target = VIA,                                                             \
                        .needed = NEEDED,                                                          \
                        .params = PARAMS}
#define SHIM_CALL_TWIN(NAME, TARGET, FLAGS)                                                        \
    [SHIM_ID_##NAME] = {.name = #NAME,                                                             \
                        .cls = SHIM_TWIN,                                                          \
                        .flags = FLAGS,                                                            \
                        .destroys = -1,                                                            \
                        .stream = -1,                                                              \
                        .parent = -1,                                                              \
                        .host_sync = -1,                                                           \
                        .target = SHIM_ID_##TARGET}
#define SHIM_CALL_NOPARAMS(NAME, CLS, FLAGS)                                                       \
    [SHIM_ID_##NAME] = {.name = #NAME,                                                             \
                        .cls = CLS,                                                                \
                        .flags = FLAGS,                                                            \
                        .destroys = -1,                                                            \
                        .stream = -1,                                                              \
                        .parent = -1,                                                              \
                        .host_sync = -1,                                                           \
                        .params = NULL}

#endif
