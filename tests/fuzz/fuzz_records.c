/* libFuzzer target: the server's decoder of described calls. The first two bytes pick the
 * call, the rest is the record's payload as a client could write it; decoding, then every
 * device-address span the server would check, must stay within the buffers whatever the
 * bytes (ASan and UBSan watch). */
#include "channel/desc.h"
#include "channel/marshal.h"
#include "channel/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t out[CHAN_LANE_DATA];
    if (size < 2) return 0;
    const struct shim_call *d = &shim_calls[(data[0] | data[1] << 8) % SHIM_NCALLS];
    if (d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC) return 0;
    /* The server decodes a private copy (it never reads the ring twice): so do we, in a
     * buffer of exactly the record's size, so that a read past it is caught. */
    size_t len = size - 2;
    uint8_t *payload = malloc(len ? len : 1);
    if (!payload) return 0;
    memcpy(payload, data + 2, len);
    struct chan_args a;
    if (chan_unpack_call(d, payload, len, out, sizeof(out), &a) == CUDA_SUCCESS) {
        for (int i = 0; i < d->nparams; i++) {
            uint64_t bytes;
            if (d->params[i].kind == SHIM_PK_DPTR && d->params[i].span)
                (void)chan_span_eval(d, d->params[i].span, a.val, a.ptr, a.val[i], &bytes);
        }
    }
    free(payload);
    return 0;
}
