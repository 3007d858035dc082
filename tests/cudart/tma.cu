// tma: a tensor map used by a kernel, as Hopper kernels of Triton, CUTLASS and FlashAttention-3
// address memory: the host encodes a 2D tiled map (cuTensorMapEncodeTiled, through
// cudaGetDriverEntryPointByVersion), a kernel loads tiles with cp.async.bulk.tensor into
// shared memory (an mbarrier waits for the bytes) and writes them out; a tile half past the
// tensor's edge comes back zero-filled. Then cuTensorMapReplaceAddress points the same map at
// a second tensor. Every element is checked against the host's own tiles.
//
// Compute capability 9.0 or higher (skips, 77, on an older device). In CI the CPU test driver
// runs the kernel's twin (tests/cpudrv/twins.c), which reads the map it encoded.
#include "common.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#define W 256 // tensor width (floats), dimension 0
#define H 64  // tensor height, dimension 1
#define BOX_W 32
#define BOX_H 16

__device__ static inline uint32_t smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// One block per tile (x0, y0) of the list: thread 0 starts the copy, every thread waits on the
// barrier's phase 0, then the block writes its tile to out[tile].
extern "C" __global__ void tma_tiles(const __grid_constant__ CUtensorMap map, const int2 *origins,
                                     float *out)
{
    __shared__ alignas(128) float tile[BOX_H][BOX_W];
    __shared__ alignas(8) uint64_t bar;
    int2 o = origins[blockIdx.x];
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar)));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile(
            "{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(
                smem(&bar)),
            "r"((unsigned)sizeof(tile))
            : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem(tile)),
                     "l"((unsigned long long)&map), "r"(o.x), "r"(o.y), "r"(smem(&bar))
                     : "memory");
    }
    asm volatile("{ .reg .pred p;\n"
                 "WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
                 "@!p bra WAIT_%=; }" ::"r"(smem(&bar))
                 : "memory");
    float *dst = out + (size_t)blockIdx.x * BOX_H * BOX_W;
    for (int i = threadIdx.x; i < BOX_H * BOX_W; i += blockDim.x)
        dst[i] = tile[i / BOX_W][i % BOX_W];
}

static const int2 origins[] = {{0, 0}, {32, 16}, {224, 48}, {W - 16, 8}, {64, H - 8}};
#define NTILES (int)(sizeof(origins) / sizeof(origins[0]))

// Launches the tiles of map and checks them against the tensor host[] (base value `base`).
static double run_tiles(const CUtensorMap &map, const int2 *dorigins, float *dout, float base)
{
    tma_tiles<<<NTILES, 128>>>(map, dorigins, dout);
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    static float got[NTILES][BOX_H][BOX_W];
    CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int t = 0; t < NTILES; t++)
        for (int y = 0; y < BOX_H; y++)
            for (int x = 0; x < BOX_W; x++) {
                int gx = origins[t].x + x, gy = origins[t].y + y;
                float want = gx < W && gy < H ? base + (float)(gy * W + gx)
                                              : 0.0f; // zero fill past the edge
                REQUIRE(got[t][y][x] == want, "tile %d (%d, %d): %g, expected %g", t, x, y,
                        (double)got[t][y][x], (double)want);
                sum += want;
            }
    return sum;
}

int main()
{
    t_init("tma", 120);
    int ndev = 0, major = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    REQUIRE(ndev >= 1, "no device");
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major < 9) t_skip("compute capability %d.x has no tensor maps", major);
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    PFN_cuTensorMapReplaceAddress_v12000 replace = NULL;
    cudaDriverEntryPointQueryResult q1, q2;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000,
                                           cudaEnableDefault, &q1));
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", (void **)&replace, 12000,
                                           cudaEnableDefault, &q2));
    REQUIRE(q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess && encode &&
                replace,
            "no tensor map entry points");
    t_ok("tensor map entry points");

    static float host[H][W];
    float *a, *b, *dout;
    int2 *dorigins;
    CHECK(cudaMalloc(&a, sizeof(host)));
    CHECK(cudaMalloc(&b, sizeof(host)));
    CHECK(cudaMalloc(&dout, sizeof(float) * NTILES * BOX_H * BOX_W));
    CHECK(cudaMalloc(&dorigins, sizeof(origins)));
    CHECK(cudaMemcpy(dorigins, origins, sizeof(origins), cudaMemcpyHostToDevice));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = (float)(y * W + x);
    CHECK(cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = 100000.0f + (float)(y * W + x);
    CHECK(cudaMemcpy(b, host, sizeof(host), cudaMemcpyHostToDevice));

    CUtensorMap map;
    cuuint64_t dims[2] = {W, H}, strides[1] = {W * sizeof(float)};
    cuuint32_t box[2] = {BOX_W, BOX_H}, es[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, a, dims, strides, box, es,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    REQUIRE(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled: %d", (int)r);
    printf("tiles of A: sum %.1f\n", run_tiles(map, dorigins, dout, 0.0f));
    t_ok("%d tiles loaded through the map, one past each edge zero-filled", NTILES);

    r = replace(&map, b);
    REQUIRE(r == CUDA_SUCCESS, "cuTensorMapReplaceAddress: %d", (int)r);
    printf("tiles of B: sum %.1f\n", run_tiles(map, dorigins, dout, 100000.0f));
    t_ok("the same map moved to another tensor");

    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dorigins));
    t_pass();
}
