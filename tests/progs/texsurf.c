/* texsurf [--errors]: texture and surface objects and mipmapped arrays.
 *
 * Textures over linear memory (tex1Dfetch), pitched memory, a CUDA array and a level of a
 * mipmapped array, each read by a 2D stencil kernel (tests/kernels/texture.cu) that writes
 * a surface over an array; every result is checked against a CPU reference. The Get*Desc
 * calls return what was given; objects are destroyed; descriptors the driver documents as
 * bad are refused with INVALID_VALUE.
 *
 * --errors (through the shim only: the real driver's answers to freed memory and forged
 * handles are not documented, and may differ): a texture over freed memory, over memory
 * past the end of an allocation, a forged texture, surface and mipmapped array handle. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 64
#define H 48

/* What the driver answered a creation the documentation suggests it refuses, for the
 * native and shim runs to compare (the 580 driver accepted some on an H100); an object
 * made after all is destroyed again. */
static const char *tex_answer(CUresult r, CUtexObject *t)
{
    if (r == CUDA_SUCCESS) CHECK(cuTexObjectDestroy(*t));
    return t_errname(r);
}

static const char *surf_answer(CUresult r, CUsurfObject *s)
{
    if (r == CUDA_SUCCESS) CHECK(cuSurfObjectDestroy(*s));
    return t_errname(r);
}

static float src[H][W];

static void reference(float out[H][W])
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int xl = x > 0 ? x - 1 : 0, xr = x < W - 1 ? x + 1 : W - 1;
            int yu = y > 0 ? y - 1 : 0, yd = y < H - 1 ? y + 1 : H - 1;
            out[y][x] = src[y][xl] + src[y][xr] + src[yu][x] + src[yd][x] - 4.0f * src[y][x];
        }
}

static CUarray float_array(size_t w, size_t h, unsigned flags)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {
        .Width = w, .Height = h, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1, .Flags = flags};
    CUarray a;
    CHECK(cuArray3DCreate(&a, &d));
    return a;
}

static CUDA_TEXTURE_DESC point_clamp(void)
{
    CUDA_TEXTURE_DESC t;
    memset(&t, 0, sizeof t);
    t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = CU_TR_ADDRESS_MODE_CLAMP;
    t.filterMode = CU_TR_FILTER_MODE_POINT;
    return t;
}

/* Host rows into an array (or out of it). */
static void array_copy(CUarray a, void *host, size_t w, size_t h, int to_array)
{
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.WidthInBytes = w * sizeof(float);
    c.Height = h;
    if (to_array) {
        c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = w * sizeof(float);
        c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a;
    } else {
        c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a;
        c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = host, c.dstPitch = w * sizeof(float);
    }
    CHECK(cuMemcpy2D(&c));
}

/* Runs the stencil from `tex` into the surface over `out` and checks every element. */
static void stencil_check(CUfunction f, CUtexObject tex, CUsurfObject surf, CUarray out,
                          const char *what)
{
    static float want[H][W], got[H][W];
    int w = W, h = H;
    void *args[] = {&tex, &surf, &w, &h};
    memset(got, 0, sizeof got);
    array_copy(out, got, W, H, 1); /* zeroes: an element the kernel missed shows */
    CHECK(cuLaunchKernel(f, (W + 15) / 16, (H + 15) / 16, 1, 16, 16, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    array_copy(out, got, W, H, 0);
    reference(want);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            REQUIRE(got[y][x] == want[y][x], "%s: (%d, %d) is %g, want %g", what, x, y,
                    (double)got[y][x], (double)want[y][x]);
    t_ok("stencil through a texture over %s, written through a surface", what);
}

static void errors(void)
{
    CUDA_TEXTURE_DESC td = point_clamp();
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4096));
    CUDA_RESOURCE_DESC rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_LINEAR;
    rd.res.linear.devPtr = d;
    rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1;
    rd.res.linear.sizeInBytes = 8192;
    CUtexObject t;
    printf("texture past the end of an allocation: %s\n",
           t_errname(EXPECT_ERR(cuTexObjectCreate(&t, &rd, &td, NULL))));
    rd.res.linear.sizeInBytes = 4096;
    CHECK(cuMemFree(d));
    printf("texture over freed memory: %s\n",
           t_errname(EXPECT_ERR(cuTexObjectCreate(&t, &rd, &td, NULL))));
    rd.resType = CU_RESOURCE_TYPE_PITCH2D;
    CHECK(cuMemAlloc(&d, 4096));
    rd.res.pitch2D.devPtr = d;
    rd.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    rd.res.pitch2D.numChannels = 1;
    rd.res.pitch2D.width = 16;
    rd.res.pitch2D.pitchInBytes = 512;
    rd.res.pitch2D.height = 9; /* 8 * 512 + 64 bytes: one row too many */
    printf("pitched texture one row past its allocation: %s\n",
           t_errname(EXPECT_ERR(cuTexObjectCreate(&t, &rd, &td, NULL))));
    rd.res.pitch2D.height = (size_t)1 << 62; /* (height - 1) * pitch overflows */
    rd.res.pitch2D.pitchInBytes = (size_t)1 << 10;
    printf("pitched texture whose span overflows: %s\n",
           t_errname(EXPECT_ERR(cuTexObjectCreate(&t, &rd, &td, NULL))));
    CHECK(cuMemFree(d));
    CUtexObject forged_t = 0x7e57ab1eull;
    CUsurfObject forged_s = 0x5eafull;
    CUDA_RESOURCE_DESC back;
    printf("forged texture destroyed: %s\n", t_errname(EXPECT_ERR(cuTexObjectDestroy(forged_t))));
    printf("forged texture queried: %s\n",
           t_errname(EXPECT_ERR(cuTexObjectGetResourceDesc(&back, forged_t))));
    printf("forged surface destroyed: %s\n", t_errname(EXPECT_ERR(cuSurfObjectDestroy(forged_s))));
    printf("forged mipmapped array destroyed: %s\n",
           t_errname(EXPECT_ERR(cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)0x1234560))));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = (CUarray)(uintptr_t)0x1234560;
    printf("texture over a forged array: %s\n",
           t_errname(EXPECT_ERR(cuTexObjectCreate(&t, &rd, &td, NULL))));
    printf("surface over a forged array: %s\n",
           t_errname(EXPECT_ERR(cuSurfObjectCreate(&forged_s, &rd))));
    /* A mipmap level is the mipmapped array's: not the caller's to destroy. */
    CUDA_ARRAY3D_DESCRIPTOR md = {
        .Width = 16, .Height = 16, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUmipmappedArray m;
    CUarray level;
    CHECK(cuMipmappedArrayCreate(&m, &md, 3));
    CHECK(cuMipmappedArrayGetLevel(&level, m, 1));
    printf("mipmap level destroyed on its own: %s\n", t_errname(EXPECT_ERR(cuArrayDestroy(level))));
    CHECK(cuMipmappedArrayDestroy(m));
    t_pass();
}

int main(int argc, char **argv)
{
    t_init("texsurf", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    if (t_has_flag(argc, argv, "--errors")) errors();
    CUmodule mod = t_load_module("texture.ptx");
    CUfunction stencil = t_get_function(mod, "tex_stencil");
    CUfunction fetch = t_get_function(mod, "tex_fetch_double");
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            src[y][x] = (float)((x * 7 + y * 13) % 31);

    /* The surface every stencil writes: an array made for surface loads and stores. */
    CUarray out = float_array(W, H, CUDA_ARRAY3D_SURFACE_LDST);
    CUDA_RESOURCE_DESC sd;
    memset(&sd, 0, sizeof sd);
    sd.resType = CU_RESOURCE_TYPE_ARRAY;
    sd.res.array.hArray = out;
    CUsurfObject surf;
    CHECK(cuSurfObjectCreate(&surf, &sd));
    CUDA_RESOURCE_DESC back;
    memset(&back, 0xee, sizeof back);
    CHECK(cuSurfObjectGetResourceDesc(&back, surf));
    REQUIRE(back.resType == CU_RESOURCE_TYPE_ARRAY && back.res.array.hArray == out,
            "surface resource descriptor round trip");
    t_ok("surface object over an array, its descriptor read back");

    CUDA_TEXTURE_DESC td = point_clamp();

    /* Linear memory: tex1Dfetch. */
    CUdeviceptr lin, dbl;
    CHECK(cuMemAlloc(&lin, sizeof src));
    CHECK(cuMemAlloc(&dbl, sizeof src));
    CHECK(cuMemcpyHtoD(lin, src, sizeof src));
    CUDA_RESOURCE_DESC rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_LINEAR;
    rd.res.linear.devPtr = lin;
    rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1;
    rd.res.linear.sizeInBytes = sizeof src;
    CUtexObject tlin;
    CHECK(cuTexObjectCreate(&tlin, &rd, &td, NULL));
    int n = W * H;
    void *fargs[] = {&tlin, &dbl, &n};
    CHECK(cuLaunchKernel(fetch, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, fargs, NULL));
    static float got[H][W];
    CHECK(cuMemcpyDtoH(got, dbl, sizeof got));
    const float *g = &got[0][0], *s = &src[0][0]; /* flat: no indexing past a row */
    for (int i = 0; i < n; i++)
        REQUIRE(g[i] == 2.0f * s[i], "linear fetch %d: %g", i, (double)g[i]);
    t_ok("tex1Dfetch through a texture over linear memory");
    CUDA_RESOURCE_DESC rb;
    CUDA_TEXTURE_DESC tb;
    CUDA_RESOURCE_VIEW_DESC vb;
    memset(&rb, 0, sizeof rb);
    memset(&tb, 0x55, sizeof tb);
    CHECK(cuTexObjectGetResourceDesc(&rb, tlin));
    CHECK(cuTexObjectGetTextureDesc(&tb, tlin));
    REQUIRE(rb.resType == CU_RESOURCE_TYPE_LINEAR && rb.res.linear.devPtr == lin &&
                rb.res.linear.format == CU_AD_FORMAT_FLOAT && rb.res.linear.numChannels == 1 &&
                rb.res.linear.sizeInBytes == sizeof src,
            "linear resource descriptor round trip");
    REQUIRE(tb.filterMode == CU_TR_FILTER_MODE_POINT &&
                tb.addressMode[0] == CU_TR_ADDRESS_MODE_CLAMP &&
                tb.addressMode[1] == CU_TR_ADDRESS_MODE_CLAMP && tb.flags == 0,
            "texture descriptor round trip");
    t_ok("resource and texture descriptors read back");
    /* The 580 driver answers success for a texture made without a view (an H100). */
    printf("view of a texture made without one: %s\n",
           t_errname(cuTexObjectGetResourceViewDesc(&vb, tlin)));

    /* Pitched memory: rows of 256 bytes (a multiple of the pitch alignment). */
    size_t pitch = 512;
    CUdeviceptr pm;
    CHECK(cuMemAlloc(&pm, pitch * H));
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = CU_MEMORYTYPE_HOST, c2.srcHost = src, c2.srcPitch = sizeof src[0];
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE, c2.dstDevice = pm, c2.dstPitch = pitch;
    c2.WidthInBytes = sizeof src[0], c2.Height = H;
    CHECK(cuMemcpy2D(&c2));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_PITCH2D;
    rd.res.pitch2D.devPtr = pm;
    rd.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    rd.res.pitch2D.numChannels = 1;
    rd.res.pitch2D.width = W;
    rd.res.pitch2D.height = H;
    rd.res.pitch2D.pitchInBytes = pitch;
    CUtexObject tpitch;
    CHECK(cuTexObjectCreate(&tpitch, &rd, &td, NULL));
    stencil_check(stencil, tpitch, surf, out, "pitched memory");

    /* A CUDA array, with a resource view (its own format and size). */
    CUarray arr = float_array(W, H, 0);
    array_copy(arr, src, W, H, 1);
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = arr;
    CUtexObject tarr, tview;
    CHECK(cuTexObjectCreate(&tarr, &rd, &td, NULL));
    stencil_check(stencil, tarr, surf, out, "an array");
    CUDA_RESOURCE_VIEW_DESC view;
    memset(&view, 0, sizeof view);
    view.format = CU_RES_VIEW_FORMAT_FLOAT_1X32;
    view.width = W;
    view.height = H;
    CHECK(cuTexObjectCreate(&tview, &rd, &td, &view));
    memset(&vb, 0, sizeof vb);
    CHECK(cuTexObjectGetResourceViewDesc(&vb, tview));
    REQUIRE(vb.format == CU_RES_VIEW_FORMAT_FLOAT_1X32 && vb.width == W && vb.height == H,
            "resource view round trip");
    t_ok("a resource view read back");

    /* A mipmapped array: a texture over the whole (normalized coordinates, as mipmaps
     * require), and one over its level 1, which the stencil reads. */
    CUDA_ARRAY3D_DESCRIPTOR md = {
        .Width = 2 * W, .Height = 2 * H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUmipmappedArray mip;
    CHECK(cuMipmappedArrayCreate(&mip, &md, 4));
    CUarray level;
    CHECK(cuMipmappedArrayGetLevel(&level, mip, 1));
    CUDA_ARRAY3D_DESCRIPTOR ld;
    CHECK(cuArray3DGetDescriptor(&ld, level));
    REQUIRE(ld.Width == W && ld.Height == H, "level 1 is %zux%zu", ld.Width, ld.Height);
    array_copy(level, src, W, H, 1);
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = level;
    CUtexObject tlevel, tmip;
    CHECK(cuTexObjectCreate(&tlevel, &rd, &td, NULL));
    stencil_check(stencil, tlevel, surf, out, "a mipmapped array's level 1");
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    rd.res.mipmap.hMipmappedArray = mip;
    printf("mipmapped texture without normalized coordinates: %s\n",
           tex_answer(cuTexObjectCreate(&tmip, &rd, &td, NULL), &tmip));
    CUDA_TEXTURE_DESC tdn = td;
    tdn.flags = CU_TRSF_NORMALIZED_COORDINATES;
    tdn.maxMipmapLevelClamp = 3.0f;
    CHECK(cuTexObjectCreate(&tmip, &rd, &tdn, NULL));
    memset(&rb, 0, sizeof rb);
    CHECK(cuTexObjectGetResourceDesc(&rb, tmip));
    CHECK(cuTexObjectGetTextureDesc(&tb, tmip));
    REQUIRE(rb.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY &&
                rb.res.mipmap.hMipmappedArray == mip &&
                tb.flags == CU_TRSF_NORMALIZED_COORDINATES && tb.maxMipmapLevelClamp == 3.0f,
            "mipmapped texture descriptors round trip");
    t_ok("texture over a mipmapped array, its descriptors read back");

    /* Descriptors the driver documents as bad (answers printed: see tex_answer). */
    CUtexObject bad;
    CUsurfObject sbad;
    CUDA_RESOURCE_DESC br = rd;
    br.flags = 1;
    printf("resource descriptor with flags: %s\n",
           tex_answer(cuTexObjectCreate(&bad, &br, &tdn, NULL), &bad));
    memset(&br, 0, sizeof br);
    br.resType = CU_RESOURCE_TYPE_LINEAR;
    br.res.linear.devPtr = lin;
    br.res.linear.format = CU_AD_FORMAT_FLOAT;
    br.res.linear.numChannels = 3;
    br.res.linear.sizeInBytes = sizeof src;
    printf("linear texture of 3 channels: %s\n",
           tex_answer(cuTexObjectCreate(&bad, &br, &td, NULL), &bad));
    memset(&br, 0, sizeof br);
    br.resType = CU_RESOURCE_TYPE_ARRAY;
    br.res.array.hArray = arr;
    printf("surface over an array made without SURFACE_LDST: %s\n",
           surf_answer(cuSurfObjectCreate(&sbad, &br), &sbad));
    br.resType = CU_RESOURCE_TYPE_LINEAR;
    br.res.linear.devPtr = lin;
    br.res.linear.format = CU_AD_FORMAT_FLOAT;
    br.res.linear.numChannels = 1;
    br.res.linear.sizeInBytes = sizeof src;
    printf("surface over linear memory: %s\n", surf_answer(cuSurfObjectCreate(&sbad, &br), &sbad));
    printf("texture without a texture descriptor: %s\n",
           tex_answer(cuTexObjectCreate(&bad, &br, NULL, NULL), &bad));

    /* Destroy: what was destroyed is gone. */
    CHECK(cuTexObjectDestroy(tlin));
    CHECK(cuTexObjectDestroy(tpitch));
    CHECK(cuTexObjectDestroy(tview));
    CHECK(cuTexObjectDestroy(tlevel));
    CHECK(cuTexObjectDestroy(tmip));
    CHECK(cuSurfObjectDestroy(surf));
    /* A texture over a level outlives its mipmapped array too, still the caller's. */
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = level;
    CHECK(cuTexObjectCreate(&tlevel, &rd, &td, NULL));
    CHECK(cuMipmappedArrayDestroy(mip));
    CHECK(cuTexObjectDestroy(tlevel));
    /* The array goes before the texture that views it (allowed; the texture then may not
     * be read), and the texture is still the caller's to destroy. */
    CHECK(cuArrayDestroy(arr));
    CHECK(cuTexObjectDestroy(tarr));
    t_ok("textures, surface and mipmapped array destroyed");
    CHECK(cuArrayDestroy(out));
    CHECK(cuMemFree(lin));
    CHECK(cuMemFree(dbl));
    CHECK(cuMemFree(pm));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
