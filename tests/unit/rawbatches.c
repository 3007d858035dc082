/* The hostile mode's batched copies (tests/unit/rawclient.c, rawhostile.c): COPY_BATCH and
 * COPY_BATCH3D records whose members, attributes or staged bytes do not add up, each
 * refused; then good ones served. */
#include <stdio.h>
#include <string.h>

#include "tests/unit/rawclient.h"

/* COPY_BATCH records the shim would never send (server/memory/copybatch.c): each refused,
 * then a good one served. The batch: attrs, then copies, then `extra` staged bytes. */
static CUresult batch_request(struct raw_session *x, uint64_t stream, uint32_t nattrs,
                              const CUmemcpyAttributes *a, uint32_t n,
                              const struct chan_batch_copy *m, size_t extra)
{
    static uint8_t buf[CHAN_REC_MAX];
    struct chan_copy_batch h = {.stream = stream, .count = n, .nattrs = nattrs};
    size_t len = sizeof(h), at = nattrs * sizeof(*a), cp = n * sizeof(*m);
    memcpy(buf, &h, len);
    memcpy(buf + len, a, at);
    memcpy(buf + len + at, m, cp);
    memset(buf + len + at + cp, 0, extra);
    return raw_request(x, CHAN_OP_COPY_BATCH, buf, len + at + cp + extra, NULL, 0);
}

/* A COPY_BATCH3D record of n operations m on stream st, `extra` staged bytes of 0x5a
 * after them; the reply's first cap bytes into out. */
static CUresult batch3d_request(struct raw_session *x, uint64_t st,
                                const struct chan_batch_copy3d *m, uint32_t n, size_t extra,
                                void *out, size_t cap)
{
    static uint8_t buf[CHAN_REC_MAX];
    struct chan_copy_batch3d h = {.stream = st, .count = n};
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), m, n * sizeof(*m));
    memset(buf + sizeof(h) + n * sizeof(*m), 0x5a, extra);
    return raw_request(x, CHAN_OP_COPY_BATCH3D, buf, sizeof(h) + n * sizeof(*m) + extra, out, cap);
}

/* 3D operations with staged (pageable) sides: their packed extents against the record's
 * bytes and the reply lane, overflow checked; then good ones both ways. m: a 16 x 3
 * operation between device sides at d (4 KiB). */
static void hostile_staged3d(struct raw_session *x, struct chan_batch_copy3d m, uint64_t st,
                             CUdeviceptr d)
{
    struct chan_batch_copy3d many[17];
    uint8_t back[48];
    m.src.kind = m.dst.kind = CHAN_MEM_STAGED;
    raw_expect_refused("3D batch, both sides staged", batch3d_request(x, st, &m, 1, 48, NULL, 0));
    m.dst.kind = CHAN_MEM_DEVICE;
    raw_expect_refused("3D batch, staged 48 bytes in 16",
                       batch3d_request(x, st, &m, 1, 16, NULL, 0));
    raw_expect_refused("3D batch, staged 48 bytes in 64",
                       batch3d_request(x, st, &m, 1, 64, NULL, 0));
    m.width = m.height = 1ull << 32;
    raw_expect_refused("3D batch, staged 2^64 bytes", batch3d_request(x, st, &m, 1, 16, NULL, 0));
    m.width = 16;
    m.height = 3;
    m.src.kind = CHAN_MEM_DEVICE;
    raw_expect_refused("3D batch, 16 staged bytes for no side",
                       batch3d_request(x, st, &m, 1, 16, NULL, 0));
    for (int i = 0; i < 17; i++) {
        many[i] = m;
        many[i].width = 4096;
        many[i].height = 1;
        many[i].dst.kind = CHAN_MEM_STAGED;
    }
    raw_expect_refused("3D batch, staged destinations beyond the reply",
                       batch3d_request(x, st, many, 17, 0, NULL, 0));
    m.src.kind = CHAN_MEM_STAGED;
    m.dst.addr = d + 2048;
    CUresult r = batch3d_request(x, st, &m, 1, 48, NULL, 0);
    m.src = m.dst;
    m.dst.kind = CHAN_MEM_STAGED;
    memset(back, 0, sizeof(back));
    if (r == CUDA_SUCCESS) r = batch3d_request(x, st, &m, 1, 0, back, sizeof(back));
    for (size_t i = 0; r == CUDA_SUCCESS && i < sizeof(back); i++)
        if (back[i] != 0x5a) r = CUDA_ERROR_UNKNOWN;
    printf("%-58s %s\n", "then staged 3D sides both ways", r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
}

void raw_hostile_batches(struct raw_session *x, CUdeviceptr d)
{
    struct chan_stream_create sc = {0};
    uint64_t st = 0;
    if (raw_request(x, CHAN_OP_STREAM_CREATE, &sc, sizeof(sc), &st, sizeof(st)) != CUDA_SUCCESS) {
        printf("no stream\n");
        raw_failures++;
        return;
    }
    CUmemcpyAttributes a[2];
    memset(a, 0, sizeof(a));
    a[0].srcAccessOrder = a[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    const uint32_t D = CHAN_MEM_DEVICE, S = CHAN_MEM_STAGED;
    struct chan_batch_copy m[2] = {{d + 2048, d, 16, D, D, 0, 0}, {d, d + 1024, 16, D, D, 0, 0}};
    raw_expect_refused("batch, 2 attributes for 1 copy", batch_request(x, st, 2, a, 1, m, 0));
    m[0].attr = 1;
    raw_expect_refused("batch, attribute 1 of 1", batch_request(x, st, 1, a, 1, m, 0));
    m[0].attr = 0;
    m[0].dst_kind = 7;
    raw_expect_refused("batch, a side of kind 7", batch_request(x, st, 1, a, 1, m, 0));
    m[0].src_kind = m[0].dst_kind = S;
    raw_expect_refused("batch, both sides staged", batch_request(x, st, 1, a, 1, m, 16));
    m[0] = (struct chan_batch_copy){d + 4000, d, 200, D, D, 0, 0};
    raw_expect_refused("batch, 200 bytes at 4000 of 4 KiB", batch_request(x, st, 1, a, 1, m, 0));
    m[0] = (struct chan_batch_copy){d, 0, UINT64_MAX, D, S, 0, 0};
    m[1] = (struct chan_batch_copy){d + 16, 0, 17, D, S, 0, 0};
    raw_expect_refused("batch, staged 2^64 - 1 + 17 bytes in 16",
                       batch_request(x, st, 1, a, 2, m, 16));
    m[0].bytes = 8;
    raw_expect_refused("batch, staged 8 + 17 bytes in 32", batch_request(x, st, 1, a, 2, m, 32));
    m[0] = (struct chan_batch_copy){0, d, 4096, S, D, 0, 0};
    m[1] = (struct chan_batch_copy){0, d, CHAN_LANE_DATA, S, D, 0, 0};
    raw_expect_refused("batch, staged destinations beyond the reply",
                       batch_request(x, st, 1, a, 2, m, 0));
    m[0] = (struct chan_batch_copy){d + 2048, d, 0, D, D, 0, 0};
    raw_expect_refused("batch, a copy of 0 bytes", batch_request(x, st, 1, a, 1, m, 0));
    m[0].bytes = 16;
    a[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
    raw_expect_refused("batch, source access order INVALID", batch_request(x, st, 1, a, 1, m, 0));
    a[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    raw_expect_refused("batch, on the legacy NULL stream", batch_request(x, 0, 1, a, 1, m, 0));
    CUresult r = batch_request(x, st, 1, a, 1, m, 0);
    printf("%-58s %s\n", "then a good batch", r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
    /* 3D: each operation's sides as a single copy's. */
    struct {
        struct chan_copy_batch3d h;
        struct chan_batch_copy3d m;
    } b = {{.stream = st, .count = 1}, {.width = 16, .height = 3, .depth = 1, .order = 1}};
    b.m.src = b.m.dst = (struct chan_copy_side){.kind = D, .device = -1, .addr = d, .pitch = 16};
    b.m.src.pitch = 0xfffffffffffffff8ull;
    raw_expect_refused("3D batch, 3 rows of pitch 0xfffffffffffffff8",
                       raw_request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0));
    b.m.src.pitch = 16;
    b.m.dst.kind = CHAN_MEM_ARRAY;
    b.m.dst.addr = 0x1234;
    raw_expect_refused("3D batch, an array not its own",
                       raw_request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0));
    hostile_staged3d(x, b.m, st, d);
    b.m.dst.kind = D;
    b.m.order = 0;
    raw_expect_refused("3D batch, source access order INVALID",
                       raw_request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0));
    b.m.order = 1;
    b.m.dst.addr = d + 1024;
    r = raw_request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0);
    printf("%-58s %s\n", "then a good 3D batch", r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
}
