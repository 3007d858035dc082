/* copybatch: batched copies (cuMemcpyBatchAsync: _v2, the first version with failIdx, and a
 * _ptsz twin). Batches of one and of 1000 copies; a batch mixing directions and memory kinds
 * (pageable, pinned and device memory; host to host; pageable copies small enough to travel
 * in the request and larger ones) under attributes with three index ranges; results checked
 * element by element. Refused: count 0, attrsIdxs not starting at 0 or not increasing,
 * numAttrs above count, an invalid source access order or flag, the legacy NULL stream, and a
 * copy outside the caller's memory (failIdx says which; nothing of the batch moved).
 * The 3D batch (cuMemcpy3DBatchAsync): pageable, pinned and pitched device pointers to and
 * from arrays at offsets, array to array, pointer to pointer in 3D; refused: no operations,
 * flags, a zero extent, a row shorter than the extent, arrays of different element sizes,
 * and an operation outside the caller's memory (failIdx; nothing moved). 3D batches whose
 * operations have pageable sides both ways (pitched 3D rows, arrays, small and large, more
 * than one request holds), checked byte by byte, padding included.
 * With --pause (tests/copybatch.sh): stops, printing "pause", reading a line from stdin,
 * before and after one batch of 1000 device copies, one 3D batch of 300, and one 3D batch
 * of 16 operations with pageable sides, so that a script reads the server's count of
 * requests around each. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first version and a twin, which cuda.h declares only for the driver's own build. */
CUresult batch_v1(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                  CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
                  CUstream hStream) __asm__("cuMemcpyBatchAsync");
CUresult batch_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                       CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                       CUstream hStream) __asm__("cuMemcpyBatchAsync_v2_ptsz");
CUresult batch3d_v1(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                    unsigned long long flags, CUstream hStream) __asm__("cuMemcpy3DBatchAsync");
CUresult batch3d_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags,
                         CUstream hStream) __asm__("cuMemcpy3DBatchAsync_v2_ptsz");

#define MANY 1000
#define SMALL 4096         /* travels in the request */
#define LARGE (300u << 10) /* larger than a request holds: the staging slots */
#define DEV_BYTES (4u << 20)

static CUmemcpyAttributes attr(CUmemcpySrcAccessOrder order, unsigned flags)
{
    CUmemcpyAttributes a;
    memset(&a, 0, sizeof(a));
    a.srcAccessOrder = order;
    a.flags = flags;
    return a;
}

static CUdeviceptr P(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

static void pause_here(int on)
{
    char line[16];
    if (!on) return;
    printf("pause\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin)) t_fail(__FILE__, __LINE__, "no line on stdin");
}

/* A pageable copy to the device, landed: cuMemcpyHtoD may return once the bytes are staged,
 * before the DMA ends, and the tests' stream (NON_BLOCKING) does not wait for the legacy
 * stream it ran on. */
static void htod_done(CUdeviceptr d, const void *h, size_t n)
{
    CHECK(cuMemcpyHtoD(d, h, n));
    CHECK(cuCtxSynchronize());
}

/* One copy from pageable memory to the device, and back. */
static void one(CUstream s, CUdeviceptr d)
{
    uint8_t *h = malloc(SMALL), *back = malloc(SMALL);
    t_fill_pattern(h, SMALL, 11);
    memset(back, 0, SMALL);
    CUdeviceptr dst = d, src = P(h);
    size_t size = SMALL, idx = 0;
    CUmemcpyAttributes a = attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0);
    CHECK(cuMemcpyBatchAsync(&dst, &src, &size, 1, &a, &idx, 1, s));
    dst = P(back);
    src = d;
    CHECK(cuMemcpyBatchAsync(&dst, &src, &size, 1, &a, &idx, 1, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(t_pattern_mismatch(back, SMALL, 11) == SIZE_MAX, "one copy: byte %zu differs",
            t_pattern_mismatch(back, SMALL, 11));
    t_ok("batch of one");
    free(h);
    free(back);
}

/* Every direction and kind in one batch, under three attribute ranges. */
static void mixed(CUstream s, CUdeviceptr d)
{
    uint8_t *pin;
    CHECK(cuMemAllocHost((void **)&pin, 4 * SMALL));
    uint8_t *h = malloc(2 * SMALL + 2 * LARGE), *out = calloc(1, 3 * SMALL + LARGE);
    t_fill_pattern(h, SMALL, 21);             /* pageable -> device */
    t_fill_pattern(pin, SMALL, 22);           /* pinned -> device */
    t_fill_pattern(h + SMALL, SMALL, 23);     /* pageable -> pageable */
    t_fill_pattern(h + 2 * SMALL, LARGE, 24); /* pageable -> device, large */
    CUdeviceptr dsts[9], srcs[9];
    size_t sizes[9];
    int n = 0;
#define ADD(D, S, N) (dsts[n] = (D), srcs[n] = (S), sizes[n++] = (N))
    ADD(d, P(h), SMALL);                         /* 0 HtoD pageable */
    ADD(d + SMALL, P(pin), SMALL);               /* 1 HtoD pinned */
    ADD(P(out), P(h + SMALL), SMALL);            /* 2 HtoH pageable */
    ADD(d + 2 * SMALL, P(h + 2 * SMALL), LARGE); /* 3 HtoD pageable, large */
    CHECK(cuStreamSynchronize(s));
    size_t idxs[3] = {0, 2, 3};
    CUmemcpyAttributes at[3] = {attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0),
                                attr(CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL,
                                     CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE),
                                attr(CU_MEMCPY_SRC_ACCESS_ORDER_ANY, 0)};
    CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, (size_t)n, at, idxs, 3, s));
    /* Then back: device -> pageable (small and large), device -> pinned, device -> device. */
    n = 0;
    ADD(P(out + SMALL), d, SMALL);                 /* DtoH pageable */
    ADD(P(pin + SMALL), d + SMALL, SMALL);         /* DtoH pinned */
    ADD(d + DEV_BYTES - SMALL, d + SMALL, SMALL);  /* DtoD */
    ADD(P(out + 2 * SMALL), d + 2 * SMALL, LARGE); /* DtoH pageable, large */
#undef ADD
    CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, (size_t)n, at, idxs, 2, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(out + 2 * SMALL + LARGE, d + DEV_BYTES - SMALL, SMALL));
    REQUIRE(t_pattern_mismatch(out + SMALL, SMALL, 21) == SIZE_MAX, "pageable round trip");
    REQUIRE(t_pattern_mismatch(pin + SMALL, SMALL, 22) == SIZE_MAX, "pinned round trip");
    REQUIRE(t_pattern_mismatch(out, SMALL, 23) == SIZE_MAX, "host to host");
    REQUIRE(t_pattern_mismatch(out + 2 * SMALL, LARGE, 24) == SIZE_MAX, "large round trip");
    REQUIRE(t_pattern_mismatch(out + 2 * SMALL + LARGE, SMALL, 22) == SIZE_MAX, "device copy");
    t_ok("mixed batch: 3 attribute ranges, every direction and kind");
    CHECK(cuMemFreeHost(pin));
    free(h);
    free(out);
}

/* MANY copies: device to device in a permuted order, then pageable to device (more than
 * one request holds). */
static void many(CUstream s, CUdeviceptr d, int pause)
{
    enum { W = 64 };
    uint8_t *h = malloc(MANY * W), *back = malloc(MANY * W);
    CUdeviceptr *dsts = calloc(MANY, sizeof(*dsts)), *srcs = calloc(MANY, sizeof(*srcs));
    size_t *sizes = calloc(MANY, sizeof(*sizes)), idxs[4] = {0, 10, 500, 999};
    CUmemcpyAttributes at[4] = {
        attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0), attr(CU_MEMCPY_SRC_ACCESS_ORDER_ANY, 0),
        attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE),
        attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0)};
    t_fill_pattern(h, MANY * W, 31);
    htod_done(d, h, MANY * W);
    for (int i = 0; i < MANY; i++) {
        int j = (i * 7 + 3) % MANY; /* 7 and 1000 coprime: a permutation */
        dsts[i] = d + DEV_BYTES / 2 + (CUdeviceptr)j * W;
        srcs[i] = d + (CUdeviceptr)i * W;
        sizes[i] = W;
    }
    CHECK(cuStreamSynchronize(s));
    pause_here(pause);
    CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, MANY, at, idxs, 4, s));
    pause_here(pause);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(back, d + DEV_BYTES / 2, MANY * W));
    for (int i = 0; i < MANY; i++) {
        int j = (i * 7 + 3) % MANY;
        REQUIRE(memcmp(back + j * W, h + i * W, W) == 0, "copy %d of %d", i, MANY);
    }
    t_ok("batch of %d device copies", MANY);
    /* Pageable to device, each copy its own 64 bytes. */
    t_fill_pattern(h, MANY * W, 32);
    for (int i = 0; i < MANY; i++) {
        srcs[i] = P(h + i * W);
        dsts[i] = d + (CUdeviceptr)(MANY - 1 - i) * W;
    }
    CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, MANY, at, idxs, 4, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(back, d, MANY * W));
    for (int i = 0; i < MANY; i++)
        REQUIRE(memcmp(back + (MANY - 1 - i) * W, h + i * W, W) == 0, "pageable copy %d", i);
    t_ok("batch of %d pageable copies", MANY);
    free(h);
    free(back);
    free(dsts);
    free(srcs);
    free(sizes);
}

/* Refused batches; the last one's good copies did not move either. */
static void refused(CUstream s, CUdeviceptr d)
{
    uint8_t h[256];
    memset(h, 7, sizeof(h));
    CHECK(cuMemsetD8Async(d, 0, 1024, s));
    CHECK(cuStreamSynchronize(s));
    CUdeviceptr dsts[3] = {d, d + 256, d + DEV_BYTES - 64}, srcs[3] = {P(h), P(h), P(h)};
    size_t sizes[3] = {256, 256, 256}, idxs[3] = {0, 1, 2}, fail = 0;
    CUmemcpyAttributes at[3] = {attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0),
                                attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0),
                                attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0)};
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 0, at, idxs, 1, s), CUDA_ERROR_INVALID_VALUE);
    size_t bad0[2] = {1, 2}, down[2] = {0, 0};
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, at, bad0, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, at, down, 2, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, at, idxs, 2, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, at, idxs, 0, s), CUDA_ERROR_INVALID_VALUE);
    CUmemcpyAttributes bad[2] = {attr(CU_MEMCPY_SRC_ACCESS_ORDER_INVALID, 0),
                                 attr(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, 0x80)};
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, bad, idxs, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, bad + 1, idxs, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, at, idxs, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, at, idxs, 1, CU_STREAM_LEGACY),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyBatchAsync(NULL, srcs, sizes, 1, at, idxs, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(batch_v1(dsts, srcs, sizes, 0, at, idxs, 1, &fail, s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(fail == SIZE_MAX, "failIdx %zu for a batch of none", fail);
    t_ok("bad arguments refused");
    /* Copy 2 runs past the end of the allocation. */
    EXPECT(batch_v1(dsts, srcs, sizes, 3, at, idxs, 3, &fail, s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(fail == 2, "failIdx %zu, not 2", fail);
    uint8_t back[512];
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(back, d, sizeof(back)));
    /* What a refused batch's good copies do is the driver's to say (580.159.04 moved some):
     * printed, so that the shim's output must match native's. */
    printf("refused batch: copy 0 %s, copy 1 %s\n",
           t_bytes_mismatch(back, 256, 7) == SIZE_MAX ? "moved" : "did not move",
           t_bytes_mismatch(back + 256, 256, 7) == SIZE_MAX ? "moved" : "did not move");
    t_ok("copy outside the caller's memory refused, failIdx 2");
    /* The first version's good batch, and the per-thread stream's twin (on NULL refused by
     * the driver too, 580.159.04). */
    fail = 0;
    CHECK(batch_v1(dsts, srcs, sizes, 2, at, idxs, 2, &fail, s));
    EXPECT(batch_v2_ptsz(dsts, srcs, sizes, 1, at, idxs, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(batch_v2_ptsz(dsts, srcs, sizes, 1, at, idxs, 1, CU_STREAM_PER_THREAD));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(cuMemcpyDtoH(back, d, sizeof(back)));
    REQUIRE(t_bytes_mismatch(back, sizeof(back), 7) == SIZE_MAX, "first version's batch");
    t_ok("first version and per-thread twin");
}

/* ---------------------------------------------------------------- 3D */

enum { AW = 64, AH = 32 };

static CUmemcpy3DOperand optr(CUdeviceptr p, size_t row, size_t layer)
{
    CUmemcpy3DOperand o;
    memset(&o, 0, sizeof(o));
    o.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    o.op.ptr.ptr = p;
    o.op.ptr.rowLength = row;
    o.op.ptr.layerHeight = layer;
    return o;
}

static CUmemcpy3DOperand oarr(CUarray a, size_t x, size_t y)
{
    CUmemcpy3DOperand o;
    memset(&o, 0, sizeof(o));
    o.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
    o.op.array.array = a;
    o.op.array.offset.x = x;
    o.op.array.offset.y = y;
    return o;
}

static CUDA_MEMCPY3D_BATCH_OP op3(CUmemcpy3DOperand src, CUmemcpy3DOperand dst, size_t w, size_t h,
                                  size_t d)
{
    CUDA_MEMCPY3D_BATCH_OP o;
    memset(&o, 0, sizeof(o));
    o.src = src;
    o.dst = dst;
    o.extent.width = w;
    o.extent.height = h;
    o.extent.depth = d;
    o.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    return o;
}

static CUarray array2d(CUarray_format f)
{
    CUDA_ARRAY3D_DESCRIPTOR ad;
    memset(&ad, 0, sizeof(ad));
    ad.Width = AW;
    ad.Height = AH;
    ad.Format = f;
    ad.NumChannels = 1;
    CUarray a;
    CHECK(cuArray3DCreate(&a, &ad));
    return a;
}

/* Arrays filled from pageable and pinned memory, a pitched 3D device copy, arrays read back
 * at an offset into pinned and whole into pageable memory, array to array. */
static void batch3d(CUstream s, CUdeviceptr d)
{
    CUarray a = array2d(CU_AD_FORMAT_FLOAT), b = array2d(CU_AD_FORMAT_FLOAT),
            c = array2d(CU_AD_FORMAT_FLOAT);
    const size_t n = AW * AH * sizeof(float);
    uint8_t *h = malloc(n), *out2 = malloc(n), *pin, *dev = malloc(128 * 12 * 3);
    CHECK(cuMemAllocHost((void **)&pin, 3 * n));
    t_fill_pattern(h, n, 41);
    t_fill_pattern(pin, n, 42);
    t_fill_pattern(dev, 128 * 12 * 3, 43);
    htod_done(d, dev, 128 * 12 * 3);
    CUdeviceptr d2 = d + (1u << 20);
    CUDA_MEMCPY3D_BATCH_OP ops[3] = {
        op3(optr(P(h), 0, 0), oarr(a, 0, 0), AW, AH, 1),
        op3(optr(P(pin), 0, 0), oarr(b, 0, 0), AW, AH, 1),
        op3(optr(d, 128, 12), optr(d2, 0, 0), 100, 10, 3), /* bytes: no array */
    };
    CHECK(cuMemcpy3DBatchAsync(3, ops, 0, s));
    ops[0] = op3(oarr(a, 8, 4), optr(P(pin + n), 0, 0), 32, 16, 1);
    ops[1] = op3(oarr(b, 0, 0), optr(P(out2), 0, 0), AW, AH, 1);
    ops[2] = op3(oarr(a, 0, 0), oarr(c, 0, 0), AW, AH, 1);
    CHECK(cuMemcpy3DBatchAsync(3, ops, 0, s));
    ops[0] = op3(oarr(c, 0, 0), optr(P(pin + 2 * n), AW, 0), AW, AH, 1);
    CHECK(cuMemcpy3DBatchAsync(1, ops, 0, s));
    CHECK(cuStreamSynchronize(s));
    const float *src = (const float *)h, *off = (const float *)(pin + n);
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 32; x++)
            REQUIRE(memcmp(&off[y * 32 + x], &src[(y + 4) * AW + x + 8], sizeof(float)) == 0,
                    "array at (8, 4): (%d, %d)", x, y); /* bytes: a pattern may be a NaN */
    REQUIRE(t_pattern_mismatch(out2, n, 42) == SIZE_MAX, "pinned to array to pageable");
    REQUIRE(t_pattern_mismatch(pin + 2 * n, n, 41) == SIZE_MAX, "array to array");
    uint8_t *got = malloc(100 * 10 * 3);
    CHECK(cuMemcpyDtoH(got, d2, 100 * 10 * 3));
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 10; y++)
            REQUIRE(memcmp(got + (z * 10 + y) * 100, dev + (z * 12 + y) * 128, 100) == 0,
                    "pitched 3D copy: row %d of slice %d", y, z);
    t_ok("3D batches: arrays at offsets, pageable, pinned, pitched 3D, array to array");

    CUarray u = array2d(CU_AD_FORMAT_UNSIGNED_INT8);
    size_t fail = 0;
    ops[0] = op3(optr(P(pin), 0, 0), optr(d2, 0, 0), 64, 1, 1);
    EXPECT(cuMemcpy3DBatchAsync(0, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpy3DBatchAsync(1, ops, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpy3DBatchAsync(1, NULL, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpy3DBatchAsync(1, ops, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    ops[1] = op3(oarr(a, 0, 0), oarr(u, 0, 0), 4, 1, 1);
    EXPECT(cuMemcpy3DBatchAsync(2, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
    ops[1] = op3(optr(d, 50, 0), optr(d2, 0, 0), 64, 2, 1);
    EXPECT(cuMemcpy3DBatchAsync(2, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
    ops[1] = op3(optr(d, 0, 0), optr(d2, 0, 0), 64, 0, 1);
    EXPECT(cuMemcpy3DBatchAsync(2, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
    ops[1] = op3(optr(d, 0, 0), optr(d2, 0, 0), 64, 1, 1);
    ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
    EXPECT(cuMemcpy3DBatchAsync(2, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
    t_ok("3D: bad arguments refused");
    CHECK(cuMemsetD8Async(d2, 0, 64, s));
    ops[1] = op3(optr(d, 0, 0), optr(d + DEV_BYTES - 32, 0, 0), 64, 1, 1);
    EXPECT(batch3d_v1(2, ops, &fail, 0, s), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(got, d2, 64));
    /* The driver's failIdx and what moved, printed (580.159.04 named no operation). */
    printf("refused 3D batch: failIdx %s, operation 0 %s\n",
           fail == SIZE_MAX ? "none"
           : fail == 1      ? "1"
                            : "other",
           t_bytes_mismatch(got, 64, 0) == SIZE_MAX ? "did not move" : "moved");
    t_ok("3D: an operation outside the caller's memory refused");
    EXPECT(batch3d_v2_ptsz(1, ops, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(batch3d_v2_ptsz(1, ops, 0, CU_STREAM_PER_THREAD)); /* 64 bytes of pin */
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(cuMemcpyDtoH(got, d2, 64));
    REQUIRE(t_pattern_mismatch(got, 64, 42) == SIZE_MAX, "3D per-thread twin");
    t_ok("3D: per-thread twin");
    CHECK(cuMemFreeHost(pin));
    for (CUarray *x = (CUarray[]){a, b, c, u}, *e = x + 4; x < e; x++)
        CHECK(cuArrayDestroy(*x));
    free(h);
    free(out2);
    free(dev);
    free(got);
}

/* ---------------------------------------------------------------- 3D, pageable sides */

/* One box of a 3D layout: its first byte, bytes per row and rows per slice. */
struct box {
    const uint8_t *p;
    size_t row, layer;
};

/* Checks a w x h x d byte extent of got against want, byte by byte; a pageable
 * destination's bytes outside the extent (its rows' and slices' padding) must still be
 * PAD. */
#define PAD 0xEE
static void check_box(struct box got, struct box want, size_t w, size_t h, size_t d, int padded,
                      const char *what)
{
    for (size_t z = 0; z < d; z++)
        for (size_t y = 0; y < (padded ? got.layer : h); y++)
            for (size_t x = 0; x < (padded ? got.row : w); x++) {
                uint8_t g = got.p[(z * got.layer + y) * got.row + x];
                if (x < w && y < h)
                    REQUIRE(g == want.p[(z * want.layer + y) * want.row + x],
                            "%s: byte (%zu, %zu, %zu)", what, x, y, z);
                else
                    REQUIRE(g == PAD, "%s: padding (%zu, %zu, %zu) written", what, x, y, z);
            }
}

/* Four pageable sources of 30000 bytes each, then four such destinations, into and out of
 * device memory at dv: more than one request or reply holds (the batch splits). */
static void split3d(CUstream s, CUdeviceptr dv)
{
    enum { N = 4, W = 100, H = 300, B = W * H };
    uint8_t *in = malloc(N * B), *out = malloc(N * B);
    t_fill_pattern(in, N * B, 54);
    memset(out, 0, N * B);
    CUDA_MEMCPY3D_BATCH_OP ops[N];
    for (int i = 0; i < N; i++)
        ops[i] = op3(optr(P(in + i * B), 0, 0), optr(dv + (CUdeviceptr)i * B, 0, 0), W, H, 1);
    CHECK(cuMemcpy3DBatchAsync(N, ops, 0, s));
    for (int i = 0; i < N; i++)
        ops[i] = op3(optr(dv + (CUdeviceptr)i * B, 0, 0), optr(P(out + i * B), 0, 0), W, H, 1);
    CHECK(cuMemcpy3DBatchAsync(N, ops, 0, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(t_pattern_mismatch(out, N * B, 54) == SIZE_MAX, "pageable sides over several requests");
    t_ok("3D batches whose pageable bytes fill more than one request or reply");
    free(in);
    free(out);
}

/* 3D batches whose operations have pageable sides both ways: pitched 3D pageable rows to
 * and from device memory, to and from an array at an offset, and one operation too large to
 * ride in the request (through the staging slots), among the small ones. */
static void pageable3d(CUstream s, CUdeviceptr d)
{
    CUdeviceptr d3 = d + (3u << 20), dl = d3 + 4096;
    CUarray fa = array2d(CU_AD_FORMAT_FLOAT);
    enum { LW = 200, LH = 200 }; /* 40000 bytes: over what a request carries */
    uint8_t *hs = malloc(40 * 6 * 3), *hd = malloc(48 * 5 * 3), *hf = malloc(20 * 8 * 4),
            *hg = malloc(24 * 8 * 4), *hl = malloc(LW * LH), *hl2 = malloc(LW * LH);
    t_fill_pattern(hs, 40 * 6 * 3, 51);
    t_fill_pattern(hf, 20 * 8 * 4, 52);
    t_fill_pattern(hl, LW * LH, 53);
    memset(hd, PAD, 48 * 5 * 3);
    memset(hg, PAD, 24 * 8 * 4);
    memset(hl2, 0, LW * LH);
    CUDA_MEMCPY3D_BATCH_OP ops[3] = {
        op3(optr(P(hs), 40, 6), optr(d3, 0, 0), 32, 4, 3), /* pitched 3D pageable source */
        op3(optr(P(hf), 20, 0), oarr(fa, 4, 2), 16, 8, 1), /* float rows 20 apart */
        op3(optr(P(hl), 0, 0), optr(dl, 0, 0), LW, LH, 1),
    };
    CHECK(cuMemcpy3DBatchAsync(3, ops, 0, s));
    ops[0] = op3(optr(d3, 0, 0), optr(P(hd), 48, 5), 32, 4, 3);
    ops[1] = op3(oarr(fa, 4, 2), optr(P(hg), 24, 0), 16, 8, 1);
    ops[2] = op3(optr(dl, 0, 0), optr(P(hl2), 0, 0), LW, LH, 1);
    size_t fail = 0;
    CHECK(batch3d_v1(3, ops, &fail, 0, s));
    CHECK(cuStreamSynchronize(s));
    check_box((struct box){hd, 48, 5}, (struct box){hs, 40, 6}, 32, 4, 3, 1,
              "pageable to device to pageable, pitched 3D");
    check_box((struct box){hg, 24 * 4, 8}, (struct box){hf, 20 * 4, 8}, 16 * 4, 8, 1, 1,
              "pageable to array at (4, 2) to pageable");
    REQUIRE(t_pattern_mismatch(hl2, LW * LH, 53) == SIZE_MAX, "large pageable operations");
    t_ok("3D batches with pageable sides both ways: pitched 3D, arrays, small and large");
    CHECK(cuArrayDestroy(fa));
    for (uint8_t **x = (uint8_t *[]){hs, hd, hf, hg, hl, hl2}, **e = x + 6; x < e; x++)
        free(*x);
    split3d(s, d3 + (64u << 10));
}

/* --pause: one 3D batch of 300 pitched device copies, then one of 16 operations with
 * pageable sides (8 pitched 3D sources to device memory, 8 device sources to pitched 3D
 * destinations), each between two stops. */
static void paused_3d(CUstream s, CUdeviceptr d)
{
    enum { N = 300, NP = 16, HB = 10 * 5 * 2, DB = 8 * 4 * 2 };
    static CUDA_MEMCPY3D_BATCH_OP ops[N];
    for (int i = 0; i < N; i++)
        ops[i] = op3(optr(d + (CUdeviceptr)i * 64, 32, 0),
                     optr(d + DEV_BYTES / 2 + (CUdeviceptr)i * 64, 32, 0), 16, 2, 1);
    CUdeviceptr dq = d + (3u << 20), dp = dq + 4096;
    static uint8_t hp[NP / 2 * HB], ho[NP / 2 * HB], q[NP / 2 * DB], got[NP / 2 * DB];
    t_fill_pattern(hp, sizeof(hp), 61);
    t_fill_pattern(q, sizeof(q), 62);
    memset(ho, PAD, sizeof(ho));
    htod_done(dq, q, sizeof(q));
    CHECK(cuStreamSynchronize(s));
    pause_here(1);
    CHECK(cuMemcpy3DBatchAsync(N, ops, 0, s));
    pause_here(1);
    for (int i = 0; i < NP / 2; i++) {
        ops[i] = op3(optr(P(hp + i * HB), 10, 5), optr(dp + (CUdeviceptr)i * DB, 0, 0), 8, 4, 2);
        ops[NP / 2 + i] =
            op3(optr(dq + (CUdeviceptr)i * DB, 0, 0), optr(P(ho + i * HB), 10, 5), 8, 4, 2);
    }
    CHECK(cuMemcpy3DBatchAsync(NP, ops, 0, s));
    pause_here(1);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(got, dp, sizeof(got)));
    for (int i = 0; i < NP / 2; i++) {
        check_box((struct box){got + i * DB, 8, 4}, (struct box){hp + i * HB, 10, 5}, 8, 4, 2, 0,
                  "paused batch: pageable source");
        check_box((struct box){ho + i * HB, 10, 5}, (struct box){q + i * DB, 8, 4}, 8, 4, 2, 1,
                  "paused batch: pageable destination");
    }
    t_ok("3D batch of %d pitched device copies, and one of %d with pageable sides", N, NP);
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    int pause = t_has_flag(argc, argv, "--pause");
    t_init("copybatch", 120);
    t_setup(&dev, &ctx);
    CUstream s;
    CUdeviceptr d;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&d, DEV_BYTES));
    if (!pause) {
        one(s, d);
        mixed(s, d);
    }
    many(s, d, pause);
    if (!pause) {
        refused(s, d);
        batch3d(s, d);
        pageable3d(s, d);
    } else {
        paused_3d(s, d);
    }
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
    t_pass();
}
