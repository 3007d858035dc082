// Tensor maps: the encoders check their arguments by the rules cuda.h states for each
// (CUDA_ERROR_INVALID_VALUE for any broken one) and write a deterministic 128-byte map:
// the address in its first word, so that a test sees ReplaceAddress change it and nothing
// else. The real driver's map is opaque and its checks beyond cuda.h's words (a NULL
// address, which error a device below compute capability 9.0 or 10.0 gets) are to be
// confirmed on a GPU; no kernel here reads a map.
#include "cpudrv.h"

#include <string.h>

#define MAGIC 0x544d4150ull // "TMAP", in the high half of word 1

enum kind { TILED = 1, IM2COL, WIDE };

// The byte size of n elements of type dt along dimension 0 (the packed types: 16 values
// per 8 bytes, or per 16 bytes with gaps), 0 for an unknown type.
static uint64_t bytes_of(unsigned dt, uint64_t n)
{
    static const unsigned char size[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
    if (dt < sizeof(size)) return n * size[dt];
    if (dt == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B) return (n + 15) / 16 * 8;
    if (dt <= CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) return (n + 15) / 16 * 16;
    return 0;
}

static int packed16(unsigned dt)
{
    return dt == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B ||
           dt == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}

static int is_float(unsigned dt)
{
    switch (dt) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
        return 1;
    default:
        return 0;
    }
}

// The address alignment a map of this type and interleave needs.
static uint64_t align_of(unsigned dt, unsigned interleave)
{
    return interleave == CU_TENSOR_MAP_INTERLEAVE_32B || packed16(dt) ? 32 : 16;
}

// The swizzle span in bytes the box's inner dimension must fit in (0: no swizzle).
static uint64_t swizzle_span(unsigned swizzle)
{
    static const uint64_t span[] = {0, 32, 64, 128, 128, 128, 128};
    return span[swizzle];
}

// What every encoder shares: the map, type, rank, address, dims, strides, element strides
// and the enums. Returns 0 when all follow cuda.h's rules.
struct common {
    CUtensorMap *map;
    unsigned dt, rank, rank_min;
    uint64_t addr;
    const cuuint64_t *dims, *strides;
    const cuuint32_t *estrides;
    unsigned interleave, swizzle, l2, oob;
};

static int common_ok(const struct common *a)
{
    // cuda.h asks for a 64-byte aligned map; the real driver takes any address (580.159.04).
    if (!a->map || !bytes_of(a->dt, 1)) return 0;
    if (a->rank < a->rank_min || a->rank > 5) return 0;
    if (a->interleave > CU_TENSOR_MAP_INTERLEAVE_32B ||
        a->swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
        a->l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
        a->oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
        return 0;
    if (a->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && a->rank < 3) return 0;
    if (!a->addr || a->addr % align_of(a->dt, a->interleave)) return 0;
    if (!a->dims || !a->estrides || (a->rank > 1 && !a->strides)) return 0;
    for (unsigned d = 0; d < a->rank; d++) {
        if (a->dims[d] == 0 || a->dims[d] > (1ull << 32)) return 0;
        if (a->estrides[d] == 0 || a->estrides[d] > 8) return 0;
    }
    if (packed16(a->dt) && a->dims[0] % 128) return 0;
    if (a->dt == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && a->dims[0] % 2) return 0;
    uint64_t smult = a->interleave == CU_TENSOR_MAP_INTERLEAVE_32B || packed16(a->dt) ? 32 : 16;
    for (unsigned d = 0; d + 1 < a->rank; d++)
        if (a->strides[d] % smult || a->strides[d] >= (1ull << 40)) return 0;
    if (a->interleave == CU_TENSOR_MAP_INTERLEAVE_32B && a->swizzle != CU_TENSOR_MAP_SWIZZLE_32B)
        return 0;
    if (a->dt == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B &&
        (a->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE ||
         (a->swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && a->swizzle != CU_TENSOR_MAP_SWIZZLE_128B &&
          a->swizzle != CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B &&
          a->swizzle != CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B)))
        return 0;
    if (a->dt == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B &&
        a->swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && a->swizzle != CU_TENSOR_MAP_SWIZZLE_128B &&
        a->swizzle != CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B)
        return 0;
    if (a->oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float(a->dt)) return 0;
    return 1;
}

// The box's inner dimension (inner bytes) against the swizzle span, without interleave.
static int inner_ok(const struct common *a, uint64_t inner)
{
    uint64_t span = swizzle_span(a->swizzle);
    return a->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || !span || inner <= span;
}

// Writes the map: word 0 the address, word 1 the magic and the enums, then dims (2..6),
// strides (7..10), element strides (12) and the encoder's own words (13..15).
static void encode(const struct common *a, enum kind k, unsigned mode, uint64_t w13, uint64_t w14,
                   uint64_t w15)
{
    uint64_t q[CU_TENSOR_MAP_NUM_QWORDS] = {0}; // copied whole: the map may be unaligned
    q[0] = a->addr;
    q[1] = MAGIC << 32 | (uint64_t)k << 28 | (uint64_t)a->dt << 20 | (uint64_t)a->rank << 16 |
           (uint64_t)a->interleave << 12 | (uint64_t)a->swizzle << 8 | (uint64_t)a->l2 << 4 |
           (uint64_t)a->oob << 2 | mode;
    for (unsigned d = 0; d < a->rank; d++) {
        q[2 + d] = a->dims[d];
        q[12] |= (uint64_t)a->estrides[d] << (4 * d);
        if (d + 1 < a->rank) q[7 + d] = a->strides[d];
    }
    q[13] = w13;
    q[14] = w14;
    q[15] = w15;
    memcpy(a->map, q, sizeof(q));
}

static CUresult finish(const struct common *a, int ok)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    return ok && common_ok(a) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                cuuint32_t tensorRank, void *globalAddress,
                                const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    struct common a = {
        tensorMap,   tensorDataType, tensorRank,     1,          (uintptr_t)globalAddress,
        globalDim,   globalStrides,  elementStrides, interleave, swizzle,
        l2Promotion, oobFill};
    int ok = boxDim != NULL && common_ok(&a);
    uint64_t boxes[2] = {0, 0};
    for (unsigned d = 0; ok && d < tensorRank; d++) {
        ok = boxDim[d] >= 1 && boxDim[d] <= 256;
        boxes[d / 4] |= (uint64_t)boxDim[d] << (16 * (d % 4));
    }
    if (ok) {
        uint64_t inner = bytes_of(tensorDataType, boxDim[0]);
        ok = (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || inner % 16 == 0) &&
             inner_ok(&a, inner) && (!packed16(tensorDataType) || boxDim[0] == 128);
    }
    CUresult rc = finish(&a, ok);
    if (!rc) encode(&a, TILED, 0, boxes[0], boxes[1], 0);
    return TR(rc);
}

// An im2col pixel box's corner offsets: in their range for the rank (cuda.h), and a non-zero
// extent along each spatial dimension (the box runs from the lower corner to the dimension's
// end plus the upper corner). The lower ones go to *wlo, the upper ones to *whi, 16 bits each.
static int corners_ok(unsigned rank, const cuuint64_t *dims, const int *lo, const int *hi,
                      uint64_t *wlo, uint64_t *whi)
{
    static const int lim[] = {32768, 128, 16};
    if (!lo || !hi) return 0;
    for (unsigned i = 0; i + 2 < rank; i++) {
        int l = lim[rank - 3];
        if (lo[i] < -l || lo[i] >= l || hi[i] < -l || hi[i] >= l) return 0;
        if ((int64_t)dims[rank - 2 - i] + hi[i] - lo[i] <= 0) return 0;
        *wlo |= (uint64_t)(uint16_t)lo[i] << (16 * i);
        *whi |= (uint64_t)(uint16_t)hi[i] << (16 * i);
    }
    return 1;
}

// channelsPerPixel and pixelsPerColumn as cuda.h bounds them; the inner dimension is a pixel's
// channels.
static int pixels_ok(const struct common *a, cuuint32_t channels, cuuint32_t pixels,
                     int ignore_pixels)
{
    if (channels == 0 || channels > 256 || (packed16(a->dt) && channels != 128)) return 0;
    if (!ignore_pixels && (pixels == 0 || pixels > 1024)) return 0;
    return inner_ok(a, bytes_of(a->dt, channels));
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                 cuuint32_t tensorRank, void *globalAddress,
                                 const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                 const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                 cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                 CUtensorMapFloatOOBfill oobFill)
{
    struct common a = {
        tensorMap,   tensorDataType, tensorRank,     3,          (uintptr_t)globalAddress,
        globalDim,   globalStrides,  elementStrides, interleave, swizzle,
        l2Promotion, oobFill};
    uint64_t lo = 0, hi = 0;
    int ok = common_ok(&a) && pixels_ok(&a, channelsPerPixel, pixelsPerColumn, 0) &&
             corners_ok(tensorRank, globalDim, pixelBoxLowerCorner, pixelBoxUpperCorner, &lo, &hi);
    CUresult rc = finish(&a, ok);
    if (!rc)
        encode(&a, IM2COL, 0, lo | (uint64_t)channelsPerPixel << 48,
               hi | (uint64_t)pixelsPerColumn << 48, 0);
    return TR(rc);
}

CUresult cuTensorMapEncodeIm2colWide(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
    cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill)
{
    struct common a = {
        tensorMap,   tensorDataType, tensorRank,     3,          (uintptr_t)globalAddress,
        globalDim,   globalStrides,  elementStrides, interleave, swizzle,
        l2Promotion, oobFill};
    int lo = pixelBoxLowerCornerWidth, hi = pixelBoxUpperCornerWidth;
    int ok = common_ok(&a) && mode <= CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128 &&
             (swizzle == CU_TENSOR_MAP_SWIZZLE_64B || swizzle == CU_TENSOR_MAP_SWIZZLE_128B ||
              swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B) &&
             pixels_ok(&a, channelsPerPixel, pixelsPerColumn,
                       mode == CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128) &&
             lo >= -32768 && lo < 32768 && hi >= -32768 && hi < 32768 &&
             (int64_t)globalDim[1] + hi - lo > 0; // W is dimension 1 (NWC, NHWC, NDHWC)
    CUresult rc = finish(&a, ok);
    if (!rc)
        encode(&a, WIDE, mode, (uint16_t)lo | (uint64_t)channelsPerPixel << 48,
               (uint16_t)hi | (uint64_t)pixelsPerColumn << 48, 0);
    return TR(rc);
}

// A map this driver encoded gets a new address, aligned as its type and interleave need.
CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    uint64_t w, addr = (uintptr_t)globalAddress;
    if (tensorMap) memcpy(&w, (char *)tensorMap + 8, sizeof(w)); // the map may be unaligned
    if (!tensorMap || w >> 32 != MAGIC) return TR(CUDA_ERROR_INVALID_VALUE);
    if (!addr || addr % align_of((w >> 20) & 0xff, (w >> 12) & 0xf))
        return TR(CUDA_ERROR_INVALID_VALUE);
    memcpy(tensorMap, &addr, sizeof(addr));
    return TR(CUDA_SUCCESS);
}

int cpudrv_tmap_read(const void *m, struct cpudrv_tmap *out)
{
    uint64_t q[CU_TENSOR_MAP_NUM_QWORDS];
    memcpy(q, m, sizeof(q));
    if (q[1] >> 32 != MAGIC || ((q[1] >> 28) & 0xf) != TILED) return -1;
    out->addr = q[0];
    out->dt = (q[1] >> 20) & 0xff;
    out->rank = (q[1] >> 16) & 0xf;
    out->esize =
        out->dt <= CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ ? (unsigned)bytes_of(out->dt, 1) : 0;
    for (unsigned d = 0; d < out->rank && d < 5; d++) {
        out->dims[d] = q[2 + d];
        out->box[d] = (q[13 + d / 4] >> (16 * (d % 4))) & 0xffff;
        if (d + 1 < out->rank) out->strides[d] = q[7 + d];
    }
    return 0;
}
