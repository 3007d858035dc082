/* Seeds for fuzz_records: one valid record per described call, packed by the client's own
 * packer from all-zero arguments (NULL pointers, zero counts), each prefixed with the two
 * bytes fuzz_records reads as the call id. From valid records the fuzzer reaches the
 * decoder's deeper checks (counts, spans, strings) that random bytes rarely pass.
 * Usage: seed_records DIR */
#include "channel/desc.h"
#include "channel/marshal.h"
#include "channel/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seed_records DIR\n");
        return 2;
    }
    int n = 0;
    for (int id = 0; id < SHIM_NCALLS; id++) {
        const struct shim_call *d = &shim_calls[id];
        if (d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC) continue;
        uint64_t zero[CHAN_MAX_ARGS] = {0};
        const void *argv_[CHAN_MAX_ARGS];
        for (int i = 0; i < CHAN_MAX_ARGS; i++)
            argv_[i] = &zero[i];
        static uint8_t buf[CHAN_REC_MAX];
        size_t rlen;
        CUresult err;
        size_t len = chan_pack_call(d, argv_, buf + 2, sizeof(buf) - 2, &rlen, &err);
        if (err != CUDA_SUCCESS) continue;
        buf[0] = (uint8_t)(id & 0xff);
        buf[1] = (uint8_t)(id >> 8);
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], d->name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len + 2, f) != len + 2) {
            perror(path);
            return 1;
        }
        fclose(f);
        n++;
    }
    printf("%d seed records\n", n);
    return 0;
}
