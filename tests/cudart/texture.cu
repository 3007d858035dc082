// texture: texture and surface objects through the CUDA runtime. A 2D stencil reads a
// texture over a cudaArray (cudaCreateTextureObject, tex2D) and writes a surface over
// another (cudaCreateSurfaceObject, surf2Dwrite); then a texture over linear memory is read
// with tex1Dfetch. Every element is checked against a CPU reference; the runtime's
// descriptor queries return what was given.
#include "common.h"
#include "../kernels/texture.cu"

#define W 64
#define H 48

static float src[H][W], got[H][W];

int main()
{
    t_init("texture", 120);
    CHECK(cudaSetDevice(0));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            src[y][x] = (float)((x * 5 + y * 11) % 29);
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
    cudaArray_t in, out;
    CHECK(cudaMallocArray(&in, &ch, W, H));
    CHECK(cudaMallocArray(&out, &ch, W, H, cudaArraySurfaceLoadStore));
    CHECK(cudaMemcpy2DToArray(in, 0, 0, src, sizeof src[0], sizeof src[0], H,
                              cudaMemcpyHostToDevice));

    cudaResourceDesc rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = in;
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex;
    CHECK(cudaCreateTextureObject(&tex, &rd, &td, NULL));
    rd.res.array.array = out;
    cudaSurfaceObject_t surf;
    CHECK(cudaCreateSurfaceObject(&surf, &rd));
    t_ok("texture and surface objects over arrays");

    dim3 block(16, 16), grid((W + 15) / 16, (H + 15) / 16);
    tex_stencil<<<grid, block>>>(tex, surf, W, H);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy2DFromArray(got, sizeof got[0], out, 0, 0, sizeof got[0], H,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int xl = x > 0 ? x - 1 : 0, xr = x < W - 1 ? x + 1 : W - 1;
            int yu = y > 0 ? y - 1 : 0, yd = y < H - 1 ? y + 1 : H - 1;
            float want = src[y][xl] + src[y][xr] + src[yu][x] + src[yd][x] - 4.0f * src[y][x];
            REQUIRE(got[y][x] == want, "(%d, %d) is %g, want %g", x, y, (double)got[y][x],
                    (double)want);
        }
    t_ok("tex2D stencil written with surf2Dwrite: all %d elements", W * H);

    cudaResourceDesc back;
    memset(&back, 0, sizeof back);
    CHECK(cudaGetTextureObjectResourceDesc(&back, tex));
    REQUIRE(back.resType == cudaResourceTypeArray && back.res.array.array == in,
            "texture resource read back");
    CHECK(cudaGetSurfaceObjectResourceDesc(&back, surf));
    REQUIRE(back.resType == cudaResourceTypeArray && back.res.array.array == out,
            "surface resource read back");
    t_ok("resource descriptors read back");

    float *lin, *dbl;
    CHECK(cudaMalloc(&lin, sizeof src));
    CHECK(cudaMalloc(&dbl, sizeof src));
    CHECK(cudaMemcpy(lin, src, sizeof src, cudaMemcpyHostToDevice));
    memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeLinear;
    rd.res.linear.devPtr = lin;
    rd.res.linear.desc = ch;
    rd.res.linear.sizeInBytes = sizeof src;
    cudaTextureObject_t tlin;
    CHECK(cudaCreateTextureObject(&tlin, &rd, &td, NULL));
    tex_fetch_double<<<(W * H + 255) / 256, 256>>>(tlin, dbl, W * H);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(got, dbl, sizeof got, cudaMemcpyDeviceToHost));
    const float *g = &got[0][0], *s = &src[0][0]; // flat: rows of one array, no row overrun
    for (int i = 0; i < W * H; i++)
        REQUIRE(g[i] == 2.0f * s[i], "fetch %d is %g", i, (double)g[i]);
    t_ok("tex1Dfetch over linear memory: all %d elements", W * H);

    CHECK(cudaDestroyTextureObject(tlin));
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaFreeArray(in));
    CHECK(cudaFreeArray(out));
    CHECK(cudaFree(lin));
    CHECK(cudaFree(dbl));
    CHECK(cudaDeviceReset());
    t_ok("destroyed, device reset");
    t_pass();
}
