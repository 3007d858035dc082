/* How a copy with a pageable host side is cut into staging chunks.
 *
 * Both ends run the same plan over the same extent, so they agree on every chunk without
 * sending it: the client packs (HtoD) or unpacks (DtoH) host rows, the server issues one
 * GPU copy per chunk between the slot and the device side. A chunk is a run of whole rows
 * of one 2D slice when a row fits in a slot, else a piece of one row; its bytes lie packed
 * in the slot (pitch = nbytes). */
#ifndef MPSSHIM_COPYPLAN_H
#define MPSSHIM_COPYPLAN_H

#include <stdint.h>

struct chan_chunk {
    uint64_t index;  /* 0, 1, 2 ... within this copy */
    uint64_t z, y;   /* slice and first row, relative to the copy's origin */
    uint64_t x;      /* byte offset in the row */
    uint64_t nrows;  /* rows in this chunk */
    uint64_t nbytes; /* bytes per row in this chunk */
};

/* Calls fn for each chunk of a width x height x depth copy (width in bytes) in order,
 * with at most `cap` bytes per chunk. Stops at, and returns, the first nonzero result. */
int chan_copy_plan(uint64_t width, uint64_t height, uint64_t depth, uint64_t cap,
                   int (*fn)(const struct chan_chunk *ch, void *arg), void *arg);

/* The memory one side of a width x height x depth copy (width in bytes) touches, for
 * range checks: the first byte, at offset (x, y, z) from `base` in rows of `pitch` bytes and
 * slices of `slice_rows` rows, and the span from there to one past the last byte. -1 when
 * any of it overflows 64 bits (nothing that large lies in anyone's range). */
int chan_copy_extent(uint64_t base, uint64_t x, uint64_t y, uint64_t z, uint64_t pitch,
                     uint64_t slice_rows, uint64_t width, uint64_t height, uint64_t depth,
                     uint64_t *first, uint64_t *span);

/* Number of chunks chan_copy_plan() would produce. */
uint64_t chan_copy_nchunks(uint64_t width, uint64_t height, uint64_t depth, uint64_t cap);

#endif
