/* Staging chunk plan; see copyplan.h. */
#include "channel/copyplan.h"

int chan_copy_plan(uint64_t width, uint64_t height, uint64_t depth, uint64_t cap,
                   int (*fn)(const struct chan_chunk *ch, void *arg), void *arg)
{
    struct chan_chunk ch = {0};
    if (width == 0 || height == 0 || depth == 0 || cap == 0) return 0;
    for (uint64_t z = 0; z < depth; z++) {
        if (width <= cap) {
            uint64_t rows_per = cap / width;
            for (uint64_t y = 0; y < height; y += rows_per) {
                ch.z = z;
                ch.y = y;
                ch.x = 0;
                ch.nrows = height - y < rows_per ? height - y : rows_per;
                ch.nbytes = width;
                int r = fn(&ch, arg);
                if (r) return r;
                ch.index++;
            }
        } else {
            for (uint64_t y = 0; y < height; y++)
                for (uint64_t x = 0; x < width; x += cap) {
                    ch.z = z;
                    ch.y = y;
                    ch.x = x;
                    ch.nrows = 1;
                    ch.nbytes = width - x < cap ? width - x : cap;
                    int r = fn(&ch, arg);
                    if (r) return r;
                    ch.index++;
                }
        }
    }
    return 0;
}

uint64_t chan_copy_nchunks(uint64_t width, uint64_t height, uint64_t depth, uint64_t cap)
{
    if (width == 0 || height == 0 || depth == 0 || cap == 0) return 0;
    if (width <= cap) {
        uint64_t rows_per = cap / width;
        return depth * ((height + rows_per - 1) / rows_per);
    }
    return depth * height * ((width + cap - 1) / cap);
}

int chan_copy_extent(uint64_t base, uint64_t x, uint64_t y, uint64_t z, uint64_t pitch,
                     uint64_t slice_rows, uint64_t width, uint64_t height, uint64_t depth,
                     uint64_t *first, uint64_t *span)
{
    uint64_t slice, off, t, s;
    if (width == 0 || height == 0 || depth == 0) return -1;
    if (__builtin_mul_overflow(pitch, slice_rows, &slice) ||
        __builtin_mul_overflow(z, slice, &off) || __builtin_mul_overflow(y, pitch, &t) ||
        __builtin_add_overflow(off, t, &off) || __builtin_add_overflow(off, x, &off) ||
        __builtin_add_overflow(base, off, first))
        return -1;
    if (__builtin_mul_overflow(depth - 1, slice, &s) ||
        __builtin_mul_overflow(height - 1, pitch, &t) || __builtin_add_overflow(s, t, &s) ||
        __builtin_add_overflow(s, width, span))
        return -1;
    return 0;
}
