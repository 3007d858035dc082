/* libFuzzer target: the copy planner both ends run over a client's 3D extent (extents,
 * chunk counts, chunks). Sizes come from the client: every product and sum must be checked
 * (UBSan), and the chunks must cover the extent exactly, each within the slot. */
#include "channel/copyplan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
    uint64_t bytes, chunks, cap;
};

static int count(const struct chan_chunk *ch, void *arg)
{
    struct tally *t = arg;
    if (ch->nrows * ch->nbytes > t->cap) abort();
    t->bytes += ch->nrows * ch->nbytes;
    return ++t->chunks > 4096; /* enough: the plan is proved in its first chunks */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t v[10] = {0};
    memcpy(v, data, size < sizeof(v) ? size : sizeof(v));
    uint64_t first, span;
    (void)chan_copy_extent(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], &first, &span);
    /* Plans only for extents a copy could have (the server refuses larger ones first). */
    uint64_t w = v[6] % (1u << 20) + 1, h = v[7] % 4096 + 1, d = v[8] % 64 + 1;
    uint64_t cap = v[9] % (8u << 20) + 1;
    struct tally t = {.cap = cap};
    int stopped = chan_copy_plan(w, h, d, cap, count, &t);
    if (!stopped && (t.bytes != w * h * d || t.chunks != chan_copy_nchunks(w, h, d, cap))) abort();
    return 0;
}
