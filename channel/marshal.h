/* Wire format of generic (`sync`/`async`) calls, driven by their descriptors.
 *
 * Request payload, parameter by parameter:
 *   value-like (VAL, HANDLE, DPTR, RAW)   8 bytes, the value zero-extended
 *   pointer (IN, OUT, INOUT, RANGE)       u32 present, u32 count, then for IN/INOUT the
 *                                         count * elem bytes, padded to 8
 *   STR                                   u32 present, u32 length with the NUL, bytes, pad
 *   OUTSTR                                u32 present, u32 1
 *   OUTREF                                u32 present, u32 0
 *   CTX (a value)                         the id of the client's context, 0 for NULL
 * An IN struct parameter's elements are followed by the arrays their SHIM_MK_ARRAY members
 * point to, element by element, member by member: count * elem bytes each (the count the
 * element's own member gives, at most CHAN_NESTED_MAX), padded to 8; the server points the
 * members at its copies.
 * Reply payload: the OUT, INOUT and RANGE buffers the caller passed, in parameter order,
 * each padded to 8; an OUTSTR is CHAN_OUTSTR_MAX bytes of NUL-terminated text; an OUTREF
 * a u64 element count, then CHAN_OUTREF_MAX elements' room.
 * Counts are computed once by the client from the arguments; the server takes them from
 * the request, checks them against the descriptor, and never reads client memory. */
#ifndef MPSSHIM_MARSHAL_H
#define MPSSHIM_MARSHAL_H

#include <stddef.h>
#include <stdint.h>

#include "channel/desc.h"

#define CHAN_MAX_ARGS 24
#define CHAN_OUTSTR_MAX 4096u /* longest string an OUTSTR returns, NUL included */
#define CHAN_OUTREF_MAX 512u  /* most elements an OUTREF array returns */
#define CHAN_NESTED_MAX 256u  /* most elements of an array a struct parameter points to */

/* What the client keeps of replies whose data must outlive the call: strings (for the
 * process) and OUTREF arrays (for the calling thread, until its next such call). */
struct chan_keep {
    const char *(*str)(const char *s);
    const void *(*array)(int param, const void *data, size_t bytes);
};

/* Client: packs the arguments (argv[i] = address of parameter i) into buf (cap bytes);
 * with buf NULL, only sizes them. Returns the payload size, or 0 with *err set (too
 * large, bad count). *reply_len gets the size of the expected reply. */
size_t chan_pack_call(const struct shim_call *d, const void *const *argv, uint8_t *buf, size_t cap,
                      size_t *reply_len, CUresult *err);

/* Client: copies OUT/INOUT/RANGE data of a reply into the caller's pointers; an OUTSTR's
 * text and an OUTREF's elements go through `keep`, which gives the pointers the caller
 * receives. `only`: 0 for every output, else those of parameters with one of these
 * SHIM_PF_* flags (a failed call's reply: SHIM_PF_ON_ERROR). */
void chan_unpack_reply(const struct shim_call *d, const void *const *argv, const uint8_t *reply,
                       size_t len, const struct chan_keep *keep, unsigned only);

/* Server: a decoded request. Pointers point into the request buffer (IN/INOUT/STR) or
 * into `out` (OUT/INOUT/RANGE data is laid out there), ready for the real call. */
struct chan_args {
    uint64_t val[CHAN_MAX_ARGS];   /* value of each value-like parameter */
    void *ptr[CHAN_MAX_ARGS];      /* pointer argument of each pointer parameter */
    uint32_t count[CHAN_MAX_ARGS]; /* element count of each pointer parameter */
    size_t out_off[CHAN_MAX_ARGS]; /* offset of each OUT/INOUT/RANGE/OUTSTR/OUTREF buffer in
                                      `out` */
    uint8_t absent[CHAN_MAX_ARGS]; /* the caller passed NULL (the server may still need it) */
    uint64_t spare[CHAN_MAX_ARGS]; /* stands in for outputs the caller did not ask for, and
                                      holds the driver's pointer of each OUTSTR and OUTREF */
    uint8_t *out;                  /* reply buffer */
    size_t out_len;
};

/* Server: decodes `len` payload bytes. OUT/INOUT buffers are laid out in `out` (cap
 * bytes), zeroed, INOUT data copied in; outputs the descriptor marks as needed get spare
 * storage when the caller passed NULL. 0 on success, else a CUresult for the caller. */
CUresult chan_unpack_call(const struct shim_call *d, uint8_t *payload, size_t len, uint8_t *out,
                          size_t cap, struct chan_args *a);

/* Values of a call's value-like parameters (0 for the others), from its arguments. */
void chan_values(const struct shim_call *d, const void *const *argv, uint64_t *val);
/* Evaluates a size of the descriptor (shim_size) from the values and, for dereferenced
 * terms, the element each pointer parameter points to (ptr[i], NULL when missing). 0, or
 * -1 when it overflows or reads a missing output. */
int chan_size_eval(const struct shim_call *d, const struct shim_size *z, const uint64_t *val,
                   void *const *ptr, uint64_t *out);
/* The bytes device address `addr` must hold for `span`: 0 with *bytes (0: nothing to
 * check, an empty set), or -1 when the span is invalid for the driver (misaligned, pitch
 * below the width) or too large to exist. */
int chan_span_eval(const struct shim_call *d, const struct shim_span *s, const uint64_t *val,
                   void *const *ptr, uint64_t addr, uint64_t *bytes);

#endif
