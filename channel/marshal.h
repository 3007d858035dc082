/* Wire format of generic (`sync`/`async`) calls, driven by their descriptors.
 *
 * Request payload, parameter by parameter:
 *   value-like (VAL, HANDLE, DPTR, RAW)   8 bytes, the value zero-extended
 *   pointer (IN, OUT, INOUT)              u32 present, u32 count, then for IN/INOUT the
 *                                         count * elem bytes, padded to 8
 *   STR                                   u32 present, u32 length with the NUL, bytes, pad
 * Reply payload: the OUT and INOUT buffers in parameter order, each padded to 8.
 * Counts are computed once by the client from the arguments; the server takes them from
 * the request, bounds-checks them, and never reads client memory. */
#ifndef MPSSHIM_MARSHAL_H
#define MPSSHIM_MARSHAL_H

#include <stddef.h>
#include <stdint.h>

#include "channel/desc.h"

#define CHAN_MAX_ARGS 24

/* Client: packs the arguments (argv[i] = address of parameter i) into buf (cap bytes);
 * with buf NULL, only sizes them. Returns the payload size, or 0 with *err set (too
 * large, bad count). *reply_len gets the size of the expected reply. */
size_t chan_pack_call(const struct shim_call *d, const void *const *argv, uint8_t *buf,
                      size_t cap, size_t *reply_len, CUresult *err);

/* Client: copies OUT/INOUT data of a reply into the caller's pointers. */
void chan_unpack_reply(const struct shim_call *d, const void *const *argv, const uint8_t *reply,
                       size_t len);

/* Server: a decoded request. Pointers point into the request buffer (IN/INOUT/STR) or
 * into `out` (OUT/INOUT data is copied there first), ready for the real call. */
struct chan_args {
    uint64_t val[CHAN_MAX_ARGS];    /* value of each value-like parameter */
    void *ptr[CHAN_MAX_ARGS];       /* pointer argument of each pointer parameter */
    uint32_t count[CHAN_MAX_ARGS];  /* element count of each pointer parameter */
    size_t out_off[CHAN_MAX_ARGS];  /* offset of each OUT/INOUT buffer in `out` */
    uint8_t *out;                   /* reply buffer (the lane's data) */
    size_t out_len;
};

/* Server: decodes `len` payload bytes. OUT/INOUT buffers are laid out in `out` (cap
 * bytes), zeroed, INOUT data copied in. 0 on success, else a CUresult for the caller. */
CUresult chan_unpack_call(const struct shim_call *d, uint8_t *payload, size_t len, uint8_t *out,
                          size_t cap, struct chan_args *a);

#endif
