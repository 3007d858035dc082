/* What one texel of a CUDA array takes, by format: the server counts arrays' bytes with it
 * (server/memory/arrays.c), the client sizes the elements of batched 3D copies
 * (interpose/memcpybatch3d.c). */
#ifndef MPSSHIM_TEXEL_H
#define MPSSHIM_TEXEL_H

#include <cuda.h>

/* Bits one texel takes in each format; 0: unknown. */
static inline unsigned chan_texel_bits(CUarray_format f, unsigned channels)
{
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 8 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 16 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 32 * channels;
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
        return 8;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
    case CU_AD_FORMAT_NV16:
    case CU_AD_FORMAT_YUY2:
        return 16;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT_101010_2:
    case CU_AD_FORMAT_P210:
    case CU_AD_FORMAT_P216:
    case CU_AD_FORMAT_Y210:
    case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_AYUV:
    case CU_AD_FORMAT_Y410:
        return 32;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
    case CU_AD_FORMAT_Y416:
        return 64;
    case CU_AD_FORMAT_BC1_UNORM:
    case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
        return 4;
    case CU_AD_FORMAT_BC2_UNORM:
    case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC5_UNORM:
    case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16:
    case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
        return 8;
    case CU_AD_FORMAT_NV12:
        return 12;
    case CU_AD_FORMAT_P010:
    case CU_AD_FORMAT_P016:
    case CU_AD_FORMAT_Y444_PLANAR8:
    case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
        return 24;
    case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar:
        return 48;
    default:
        return 0;
    }
}

#endif
