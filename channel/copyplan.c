/* Staging chunk plan; see copyplan.h. */
#include "channel/copyplan.h"

int chan_copy_plan(uint64_t width, uint64_t height, uint64_t depth, uint64_t cap,
                   int (*fn)(const struct chan_chunk *ch, void *arg), void *arg)
{
    struct chan_chunk ch = {0};
    if (width == 0 || height == 0 || depth == 0 || cap == 0)
        return 0;
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
                if (r)
                    return r;
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
                    if (r)
                        return r;
                    ch.index++;
                }
        }
    }
    return 0;
}

uint64_t chan_copy_nchunks(uint64_t width, uint64_t height, uint64_t depth, uint64_t cap)
{
    if (width == 0 || height == 0 || depth == 0 || cap == 0)
        return 0;
    if (width <= cap) {
        uint64_t rows_per = cap / width;
        return depth * ((height + rows_per - 1) / rows_per);
    }
    return depth * height * ((width + cap - 1) / cap);
}
