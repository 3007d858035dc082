/* tensormap: tensor maps (TMA descriptors) encoded over device memory: tiled maps of ranks 1
 * to 5 and several element types, im2col maps, the wide im2col form, ReplaceAddress, and the
 * arguments cuda.h forbids (each must give CUDA_ERROR_INVALID_VALUE).
 *
 * ReplaceAddress is checked to change the map and nothing else: the map of address A moved
 * to B is the map encoded at B, and moved back is the map of A again.
 *
 * --shim (through the shim only): the address a map names must be the caller's memory over
 * everything its dims and strides reach: a forged address, a tensor past the end of its
 * allocation, another process's memory and a map the server never made are refused. Natively
 * the driver encodes any aligned address, so this runs only through the shim. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (1u << 20)

static CUtensorMap map_a, map_b, map_c;

static const cuuint64_t dims5[5] = {64, 8, 4, 2, 2};
static const cuuint32_t box5[5] = {16, 4, 2, 2, 1}, ones[5] = {1, 1, 1, 1, 1};

/* A tiled map of rank `rank` of type dt over a dense tensor of dims5 at addr. */
static CUresult tiled(CUtensorMap *m, CUtensorMapDataType dt, unsigned esize, unsigned rank,
                      CUdeviceptr addr)
{
    cuuint64_t strides[4];
    cuuint64_t s = dims5[0] * esize;
    for (unsigned d = 0; d + 1 < rank; d++) {
        strides[d] = s;
        s *= dims5[d + 1];
    }
    return cuTensorMapEncodeTiled(m, dt, rank, (void *)addr, dims5, strides, box5, ones,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* An NHWC tensor of fp16 (C 32, W 8, H 8, N 2) for the im2col forms. */
static const cuuint64_t nhwc[4] = {32, 8, 8, 2};
static const cuuint64_t nhwc_strides[3] = {64, 512, 4096};

static CUresult im2col(CUtensorMap *m, CUdeviceptr addr, const int *lo, const int *hi,
                       cuuint32_t channels, cuuint32_t pixels, unsigned rank)
{
    return cuTensorMapEncodeIm2col(
        m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank, (void *)addr, nhwc, nhwc_strides, lo, hi,
        channels, pixels, ones, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* A tiled fp32 rank-2 map with one argument broken by `what`. */
static CUresult bad_tiled(CUtensorMap *m, CUdeviceptr addr, int what)
{
    cuuint64_t dims[2] = {64, 16}, strides[1] = {256};
    cuuint32_t box[2] = {16, 4}, es[2] = {1, 1};
    unsigned rank = 2, interleave = 0, swizzle = 0, oob = 0, dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    switch (what) {
    case 0:
        rank = 0;
        break;
    case 1:
        rank = 6;
        break;
    case 2:
        addr += 8;
        break;
    case 3:
        strides[0] = 264;
        break;
    case 4:
        strides[0] = 1ull << 40;
        break;
    case 5:
        dims[1] = 0;
        break;
    case 6:
        dims[1] = (1ull << 32) + 1;
        break;
    case 7:
        box[1] = 0;
        break;
    case 8:
        box[1] = 257;
        break;
    case 9:
        box[0] = 3;
        break; /* 12 bytes: not a multiple of 16 */
    case 10:
        es[1] = 9;
        break;
    case 11:
        es[1] = 0;
        break;
    case 12:
        dt = 99;
        break;
    case 13:
        swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
        break; /* a 64-byte inner box */
    case 14:
        interleave = CU_TENSOR_MAP_INTERLEAVE_16B;
        break; /* rank 2 */
    case 15:
        dt = CU_TENSOR_MAP_DATA_TYPE_INT32, oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
        break;
    default:
        break;
    }
    return cuTensorMapEncodeTiled(m, dt, rank, (void *)addr, dims, strides, box, es, interleave,
                                  swizzle, 0, oob);
}

#define NBAD_TILED 16

static void encodes(CUdeviceptr a, CUdeviceptr b)
{
    static const struct {
        CUtensorMapDataType dt;
        unsigned esize, rank;
    } kinds[] = {
        {CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, 1},   {CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 2},
        {CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 3}, {CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, 4},
        {CU_TENSOR_MAP_DATA_TYPE_INT64, 8, 5},   {CU_TENSOR_MAP_DATA_TYPE_FLOAT64, 8, 3},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        CHECK(tiled(&map_a, kinds[i].dt, kinds[i].esize, kinds[i].rank, a));
        t_ok("tiled map, type %d, rank %u", (int)kinds[i].dt, kinds[i].rank);
    }
    /* ReplaceAddress changes the address alone: A moved to B is B's map, moved back is A's. */
    CHECK(tiled(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 3, a));
    CHECK(tiled(&map_b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 3, b));
    REQUIRE(memcmp(&map_a, &map_b, sizeof(map_a)), "maps of two addresses are the same");
    map_c = map_a;
    CHECK(cuTensorMapReplaceAddress(&map_c, (void *)b));
    REQUIRE(!memcmp(&map_c, &map_b, sizeof(map_c)), "the map moved to B is not B's map");
    CHECK(cuTensorMapReplaceAddress(&map_c, (void *)a));
    REQUIRE(!memcmp(&map_c, &map_a, sizeof(map_c)), "the map moved back is not A's map");
    t_ok("ReplaceAddress moves a map and nothing else");
    EXPECT(cuTensorMapReplaceAddress(&map_c, (void *)(a + 8)), CUDA_ERROR_INVALID_VALUE);
    t_ok("ReplaceAddress refuses a misaligned address");

    static const int lo3[1] = {-1}, hi3[1] = {1}, lo4[2] = {-1, -1}, hi4[2] = {0, 0};
    cuuint64_t dims3[3] = {32, 64, 2}, strides3[2] = {64, 4096};
    CHECK(cuTensorMapEncodeIm2col(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, (void *)a, dims3,
                                  strides3, lo3, hi3, 32, 64, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    t_ok("im2col map, rank 3");
    CHECK(im2col(&map_a, a, lo4, hi4, 32, 64, 4));
    t_ok("im2col map, rank 4");
    map_c = map_a;
    CHECK(cuTensorMapReplaceAddress(&map_c, (void *)b));
    CHECK(im2col(&map_b, b, lo4, hi4, 32, 64, 4));
    REQUIRE(!memcmp(&map_c, &map_b, sizeof(map_c)), "the im2col map moved to B is not B's map");
    t_ok("ReplaceAddress moves an im2col map");
    /* Compute capability 10.0 and up: a device below may refuse it, the same way both ways. */
    CUresult r = cuTensorMapEncodeIm2colWide(
        &map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)a, nhwc, nhwc_strides, -1, 1, 32, 64,
        ones, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W,
        CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    printf("im2col wide map: %s\n", t_errname(r));

    for (int i = 0; i < NBAD_TILED; i++) {
        EXPECT(bad_tiled(&map_a, a, i), CUDA_ERROR_INVALID_VALUE);
        t_ok("tiled map with bad argument %d refused", i);
    }
    /* cuda.h asks for a 64-byte aligned map; what the driver refuses is printed, not assumed
     * (580.159.04 took a map 32 bytes off). */
    static _Alignas(128) uint8_t room[2 * sizeof(CUtensorMap)];
    static const unsigned offs[] = {64, 32, 16, 8, 4, 1};
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        CUtensorMap *m = (CUtensorMap *)(room + offs[i]);
        CUresult got = bad_tiled(m, a, -1);
        printf("map %u bytes off 128: tiled %s", offs[i], t_errname(got));
        if (got == CUDA_SUCCESS)
            printf(", replace %s", t_errname(cuTensorMapReplaceAddress(m, (void *)b)));
        printf("\n");
    }
    static const int far[2] = {-128, -129}, zero[2] = {0, 0};
    EXPECT(im2col(&map_a, a, lo3, hi3, 32, 64, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(im2col(&map_a, a, far, zero, 32, 64, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(im2col(&map_a, a, lo4, hi4, 257, 64, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(im2col(&map_a, a, lo4, hi4, 32, 1025, 4), CUDA_ERROR_INVALID_VALUE);
    t_ok("im2col maps with bad arguments refused");
}

/* Another process's memory: a child allocates, sends its address and waits for the parent. */
static CUdeviceptr foreign(int *to_child, pid_t *child)
{
    int up[2], down[2];
    REQUIRE(pipe(up) == 0 && pipe(down) == 0, "pipe");
    *child = fork();
    REQUIRE(*child >= 0, "fork");
    if (*child == 0) {
        CUdevice dev;
        CUcontext ctx;
        CUdeviceptr p = 0;
        close(up[0]); /* the parent's ends: the read below ends when the parent does */
        close(down[1]);
        t_setup(&dev, &ctx);
        CHECK(cuMemAlloc(&p, BYTES));
        t_write_all(up[1], &p, sizeof(p));
        char c;
        t_read_all(down[0], &c, 1);
        _exit(0);
    }
    CUdeviceptr p = 0;
    close(up[1]);
    close(down[0]);
    REQUIRE(t_read_all(up[0], &p, sizeof(p)) == 1, "no address from the child");
    *to_child = down[1];
    return p;
}

/* An allocation of BYTES whose next byte is none of the caller's: the server lets a span run
 * on into the caller's next allocation (small ones share slabs, so that is often there). */
static CUdeviceptr lone_end(void)
{
    for (int i = 0; i < 8; i++) {
        CUdeviceptr p, base;
        size_t size;
        CHECK(cuMemAlloc(&p, BYTES));
        if (cuMemGetAddressRange(&base, &size, p + BYTES) != CUDA_SUCCESS) return p;
    }
    REQUIRE(0, "eight allocations in a row, each followed by another of the caller's");
    return 0;
}

static void refusals(CUdeviceptr a, CUdeviceptr other)
{
    CUdeviceptr e = lone_end();
    EXPECT(tiled(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 2, 0x7f0000000000ull),
           CUDA_ERROR_INVALID_VALUE);
    t_ok("a forged address is refused");
    /* 64 x 8 x 4 x 2 x 2 int64: 64 KiB, ending 16 bytes past the allocation. */
    EXPECT(tiled(&map_a, CU_TENSOR_MAP_DATA_TYPE_INT64, 8, 5, e + BYTES - 65536 + 16),
           CUDA_ERROR_INVALID_VALUE);
    CHECK(tiled(&map_a, CU_TENSOR_MAP_DATA_TYPE_INT64, 8, 5, e + BYTES - 65536));
    t_ok("a tensor past the end of its memory is refused, one that fits is not");
    EXPECT(cuTensorMapReplaceAddress(&map_a, (void *)(e + BYTES - 65536 + 16)),
           CUDA_ERROR_INVALID_VALUE);
    t_ok("ReplaceAddress refuses an address whose tensor would pass the end");
    EXPECT(tiled(&map_b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 2, other), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuTensorMapReplaceAddress(&map_a, (void *)other), CUDA_ERROR_INVALID_VALUE);
    t_ok("another process's memory is refused");
    CHECK(tiled(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 2, a));
    map_c = map_a;
    map_c.opaque[5] ^= 0x10; /* a map the server never made */
    EXPECT(cuTensorMapReplaceAddress(&map_c, (void *)a), CUDA_ERROR_INVALID_VALUE);
    memset(&map_c, 0, sizeof(map_c));
    EXPECT(cuTensorMapReplaceAddress(&map_c, (void *)a), CUDA_ERROR_INVALID_VALUE);
    t_ok("ReplaceAddress of a forged map is refused");
}

int main(int argc, char **argv)
{
    t_init("tensormap", 120);
    int shim = t_has_flag(argc, argv, "--shim"), to_child = -1;
    pid_t child = -1;
    CUdeviceptr other = shim ? foreign(&to_child, &child) : 0; /* forks before any CUDA call */
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, BYTES));
    CHECK(cuMemAlloc(&b, BYTES));
    if (shim)
        refusals(a, other);
    else
        encodes(a, b);
    if (child > 0) {
        t_write_all(to_child, "x", 1);
        int st = 0;
        waitpid(child, &st, 0);
        REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed");
    }
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
