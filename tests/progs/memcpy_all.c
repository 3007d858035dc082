/* memcpy_all [--quick]: every copy and set path of the driver API, each result checked
 * byte by byte on the host (and for the linear paths also on the device with
 * write_pattern/check_pattern).
 *
 * Sections: linear copies for every size and host memory kind (sync, async on a created
 * stream and on the NULL stream, unified cuMemcpy, peer), copies at unaligned offsets inside
 * a larger allocation, 2D and 3D copies between host, pitched device memory and arrays, 1D
 * array copies, and every memset with the bytes around the target checked untouched.
 * One `ok` line per (path, size, memory kind). --quick leaves out the 8 MiB and 64 MiB sizes.
 *
 * The created stream is a blocking one (flags 0) on purpose: synchronous copies from
 * pageable memory and synchronous memsets may return before the device is done, and only
 * legacy NULL-stream ordering makes the next async operation see their result. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLACK 16384 /* device bytes past the largest size, for offsets and guard bytes */

static CUcontext g_ctx;
static CUstream g_stream;
static CUfunction f_write, f_check;
static CUdeviceptr g_d0, g_d1, g_errs;
static uint32_t *g_errs_host; /* pinned: async copies of the error count land here */
static size_t g_dev_bytes;    /* size of g_d0 and g_d1 */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    REQUIRE(p, "out of host memory (%zu bytes)", n);
    return p;
}

/* A different seed for every check, so that a copy that did not happen leaves data from an
 * earlier check, which never matches. */
static uint32_t new_seed(void)
{
    static uint32_t s = 12345;
    s = s * 1664525u + 1013904223u;
    return s;
}

/* ------------------------------------------------------------------ host memory kinds */

enum hkind { H_PAGEABLE, H_HOSTALLOC, H_ALLOCHOST, H_KINDS };
static const char *const hk_name[H_KINDS] = {"pageable", "pinned-hostalloc", "pinned-allochost"};

static void *h_alloc(enum hkind k, size_t n)
{
    void *p = NULL;
    if (k == H_PAGEABLE)
        p = xmalloc(n);
    else if (k == H_HOSTALLOC)
        CHECK(cuMemHostAlloc(&p, n, 0));
    else
        CHECK(cuMemAllocHost(&p, n));
    return p;
}

static void h_free(enum hkind k, void *p)
{
    if (k == H_PAGEABLE)
        free(p);
    else
        CHECK(cuMemFreeHost(p));
}

/* ------------------------------------------------------------------ checks */

/* Fails unless p[0..n) holds the pattern of `seed`; `what` names the case. */
static void need_pattern(const void *p, size_t n, uint32_t seed, const char *what)
{
    size_t bad = t_pattern_mismatch(p, n, seed);
    REQUIRE(bad == SIZE_MAX, "%s: byte %zu of %zu differs from what was copied", what, bad, n);
}

/* Fails unless got[0..n) equals want[0..n); `what` names the case. */
static void need_same(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
    if (memcmp(got, want, n) == 0) return;
    size_t i = 0;
    while (got[i] == want[i])
        i++;
    t_fail(__FILE__, __LINE__, "%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, got[i],
           want[i]);
}

/* Queues on `st` a count of the words of p[0..bytes/4) that differ from the pattern of
 * `seed`; the count is in *g_errs_host once `st` is synchronized. */
static void dev_check_async(CUdeviceptr p, size_t bytes, uint32_t seed, CUstream st)
{
    unsigned long long n = bytes / 4;
    *g_errs_host = ~0u;
    CHECK(cuMemsetD32Async(g_errs, 0, 1, st));
    if (n) {
        void *args[] = {&p, &n, &seed, &g_errs};
        CHECK(cuLaunchKernel(f_check, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, st, args, NULL));
    }
    CHECK(cuMemcpyDtoHAsync(g_errs_host, g_errs, 4, st));
}

static void need_no_dev_errors(const char *what)
{
    REQUIRE(*g_errs_host == 0, "%s: check_pattern found %u wrong words on the device", what,
            *g_errs_host);
}

/* Queues on `st` write_pattern over the words of p[0..bytes/4). */
static void dev_write(CUdeviceptr p, size_t bytes, uint32_t seed, CUstream st)
{
    unsigned long long n = bytes / 4;
    if (!n) return;
    void *args[] = {&p, &n, &seed};
    CHECK(cuLaunchKernel(f_write, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, st, args, NULL));
}

/* ------------------------------------------------------------------ linear copies */

/* cuMemcpyHtoD, DtoD, DtoH; device-side checks of what arrived and of what a kernel wrote. */
static void lin_sync(enum hkind k, uint8_t *src, uint8_t *dst, size_t n)
{
    char what[128];
    snprintf(what, sizeof what, "sync copies, %zu bytes, %s", n, hk_name[k]);
    uint32_t seed = new_seed(), seed2 = new_seed();

    t_fill_pattern(src, n, seed);
    CHECK(cuMemcpyHtoD(g_d0, src, n));
    dev_check_async(g_d0, n, seed, NULL);
    CHECK(cuStreamSynchronize(NULL));
    need_no_dev_errors(what);
    CHECK(cuMemcpyDtoD(g_d1, g_d0, n));
    CHECK(cuMemcpyDtoH(dst, g_d1, n));
    need_pattern(dst, n, seed, what);

    if (n >= 4) {
        dev_write(g_d1, n, seed2, NULL);
        CHECK(cuMemcpyDtoH(dst, g_d1, n & ~(size_t)3));
        need_pattern(dst, n & ~(size_t)3, seed2, what);
    }
    t_ok("memcpy HtoD/DtoD/DtoH sync, %zu bytes, %s", n, hk_name[k]);
}

/* The Async forms on `st`, with a check kernel between the copies, one sync at the end. */
static void lin_async(enum hkind k, uint8_t *src, uint8_t *dst, size_t n, CUstream st,
                      const char *sname)
{
    char what[128];
    snprintf(what, sizeof what, "async copies on %s, %zu bytes, %s", sname, n, hk_name[k]);
    uint32_t seed = new_seed();

    t_fill_pattern(src, n, seed);
    CHECK(cuMemcpyHtoDAsync(g_d0, src, n, st));
    dev_check_async(g_d0, n, seed, st);
    CHECK(cuMemcpyDtoDAsync(g_d1, g_d0, n, st));
    CHECK(cuMemcpyDtoHAsync(dst, g_d1, n, st));
    CHECK(cuStreamSynchronize(st));
    need_no_dev_errors(what);
    need_pattern(dst, n, seed, what);
    t_ok("memcpy HtoD/DtoD/DtoH async on %s, %zu bytes, %s", sname, n, hk_name[k]);
}

/* cuMemcpy / cuMemcpyAsync (st != NULL) inferring H->D, D->D, D->H and H->H. */
static void lin_unified(enum hkind k, uint8_t *src, uint8_t *dst, size_t n, int async)
{
    char what[128];
    snprintf(what, sizeof what, "unified %s, %zu bytes, %s", async ? "cuMemcpyAsync" : "cuMemcpy",
             n, hk_name[k]);
    CUdeviceptr hs = (CUdeviceptr)(uintptr_t)src, hd = (CUdeviceptr)(uintptr_t)dst;
    uint32_t seed = new_seed(), seed2 = new_seed();

    t_fill_pattern(src, n, seed);
    if (async) {
        CHECK(cuMemcpyAsync(g_d0, hs, n, g_stream));
        CHECK(cuMemcpyAsync(g_d1, g_d0, n, g_stream));
        CHECK(cuMemcpyAsync(hd, g_d1, n, g_stream));
        CHECK(cuStreamSynchronize(g_stream));
    } else {
        CHECK(cuMemcpy(g_d0, hs, n));
        CHECK(cuMemcpy(g_d1, g_d0, n));
        CHECK(cuMemcpy(hd, g_d1, n));
    }
    need_pattern(dst, n, seed, what);

    t_fill_pattern(src, n, seed2);
    if (async) {
        CHECK(cuMemcpyAsync(hd, hs, n, g_stream));
        CHECK(cuStreamSynchronize(g_stream));
    } else {
        CHECK(cuMemcpy(hd, hs, n));
    }
    need_pattern(dst, n, seed2, what);
    t_ok("%s H->D/D->D/D->H/H->H, %zu bytes, %s", async ? "cuMemcpyAsync" : "cuMemcpy", n,
         hk_name[k]);
}

/* cuMemcpyPeer and cuMemcpyPeerAsync with the primary context on both sides. */
static void lin_peer(uint8_t *src, uint8_t *dst, size_t n)
{
    uint32_t seed = new_seed(), seed2 = new_seed();

    t_fill_pattern(src, n, seed);
    CHECK(cuMemcpyHtoD(g_d0, src, n));
    CHECK(cuMemcpyPeer(g_d1, g_ctx, g_d0, g_ctx, n));
    CHECK(cuMemcpyDtoH(dst, g_d1, n));
    need_pattern(dst, n, seed, "cuMemcpyPeer");

    t_fill_pattern(src, n, seed2);
    CHECK(cuMemcpyHtoD(g_d0, src, n));
    CHECK(cuMemcpyPeerAsync(g_d1, g_ctx, g_d0, g_ctx, n, g_stream));
    CHECK(cuStreamSynchronize(g_stream));
    CHECK(cuMemcpyDtoH(dst, g_d1, n));
    need_pattern(dst, n, seed2, "cuMemcpyPeerAsync");
    t_ok("cuMemcpyPeer/PeerAsync, %zu bytes", n);
}

/* ------------------------------------------------------------------ unaligned offsets */

struct window {
    size_t dst_off, src_off, len;
};

/* Fails unless got[0..total) is `bg` except got[off..off+len) == want[0..len). */
static void need_window(const uint8_t *got, size_t total, size_t off, const uint8_t *want,
                        size_t len, uint8_t bg, const char *what)
{
    size_t bad = t_bytes_mismatch(got, off, bg);
    REQUIRE(bad == SIZE_MAX, "%s: guard byte %zu before the target changed", what, bad);
    need_same(got + off, want, len, what);
    bad = t_bytes_mismatch(got + off + len, total - off - len, bg);
    REQUIRE(bad == SIZE_MAX, "%s: guard byte %zu after the target changed", what, bad);
}

/* HtoD, DtoD and DtoH between odd offsets inside g_d0/g_d1, guard bytes checked;
 * async: the Async forms on g_stream (host buffers pinned). */
static void unaligned_case(const struct window *w, int async, uint8_t *src, uint8_t *tmp)
{
    char what[160];
    size_t total = w->dst_off + w->len + 61;
    CUstream st = g_stream;
    snprintf(what, sizeof what, "unaligned %s dst+%zu src+%zu %zu bytes", async ? "async" : "sync",
             w->dst_off, w->src_off, w->len);

    /* HtoD into the middle of a poisoned range. */
    t_fill_pattern(src, w->src_off + w->len, new_seed());
    CHECK(cuMemsetD8(g_d0, 0x5a, total));
    if (async) {
        CHECK(cuMemcpyHtoDAsync(g_d0 + w->dst_off, src + w->src_off, w->len, st));
        CHECK(cuStreamSynchronize(st));
    } else {
        CHECK(cuMemcpyHtoD(g_d0 + w->dst_off, src + w->src_off, w->len));
    }
    CHECK(cuMemcpyDtoH(tmp, g_d0, total));
    need_window(tmp, total, w->dst_off, src + w->src_off, w->len, 0x5a, what);

    /* DtoD from an odd source offset to an odd destination offset. */
    t_fill_pattern(src, w->src_off + w->len, new_seed());
    CHECK(cuMemcpyHtoD(g_d1, src, w->src_off + w->len));
    CHECK(cuMemsetD8(g_d0, 0xc3, total));
    if (async) {
        CHECK(cuMemcpyDtoDAsync(g_d0 + w->dst_off, g_d1 + w->src_off, w->len, st));
        CHECK(cuStreamSynchronize(st));
    } else {
        CHECK(cuMemcpyDtoD(g_d0 + w->dst_off, g_d1 + w->src_off, w->len));
    }
    CHECK(cuMemcpyDtoH(tmp, g_d0, total));
    need_window(tmp, total, w->dst_off, src + w->src_off, w->len, 0xc3, what);

    /* DtoH from an odd device offset into the middle of a poisoned host range. */
    memset(tmp, 0x33, total);
    if (async) {
        CHECK(cuMemcpyDtoHAsync(tmp + w->dst_off, g_d1 + w->src_off, w->len, st));
        CHECK(cuStreamSynchronize(st));
    } else {
        CHECK(cuMemcpyDtoH(tmp + w->dst_off, g_d1 + w->src_off, w->len));
    }
    need_window(tmp, total, w->dst_off, src + w->src_off, w->len, 0x33, what);
    t_ok("%s", what);
}

/* ------------------------------------------------------------------ 2D and 3D copies */

enum vkind { V_PAGEABLE, V_PINNED, V_DEVICE, V_ARRAY };

/* A pitched volume (depth 1: a 2D buffer) in one kind of memory; `unified` makes copies
 * name it with CU_MEMORYTYPE_UNIFIED. Its whole content is pitch*rows*depth bytes. */
struct vol {
    char name[32];
    enum vkind kind;
    int unified;
    uint8_t *host;
    CUdeviceptr dev;
    CUarray arr;
    size_t pitch, rows, depth, bytes;
};

/* Host volumes get pitch `width` (odd on purpose), device ones the pitch cuMemAllocPitch
 * chooses, arrays (UNSIGNED_INT32, 1 channel; width a multiple of 4) width bytes. */
static void vol_init(struct vol *v, const char *name, enum vkind kind, size_t width, size_t rows,
                     size_t depth)
{
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->kind = kind;
    v->pitch = width;
    v->rows = rows;
    v->depth = depth;
    if (kind == V_DEVICE) {
        CHECK(cuMemAllocPitch(&v->dev, &v->pitch, width, rows * depth, 4));
        REQUIRE(v->pitch >= width, "cuMemAllocPitch gave pitch %zu < width %zu", v->pitch, width);
    } else if (kind == V_ARRAY && depth == 1) {
        CUDA_ARRAY_DESCRIPTOR d = {.Width = width / 4,
                                   .Height = rows,
                                   .Format = CU_AD_FORMAT_UNSIGNED_INT32,
                                   .NumChannels = 1};
        CHECK(cuArrayCreate(&v->arr, &d));
    } else if (kind == V_ARRAY) {
        CUDA_ARRAY3D_DESCRIPTOR d = {.Width = width / 4,
                                     .Height = rows,
                                     .Depth = depth,
                                     .Format = CU_AD_FORMAT_UNSIGNED_INT32,
                                     .NumChannels = 1};
        CHECK(cuArray3DCreate(&v->arr, &d));
    }
    v->bytes = v->pitch * rows * depth;
    if (kind == V_PAGEABLE)
        v->host = xmalloc(v->bytes);
    else if (kind == V_PINNED)
        CHECK(cuMemHostAlloc((void **)&v->host, v->bytes, 0));
}

static void vol_free(struct vol *v)
{
    if (v->kind == V_PAGEABLE)
        free(v->host);
    else if (v->kind == V_PINNED)
        CHECK(cuMemFreeHost(v->host));
    else if (v->kind == V_DEVICE)
        CHECK(cuMemFree(v->dev));
    else
        CHECK(cuArrayDestroy(v->arr));
}

/* Whole-array copy between an array and a host image of pitch v->pitch. */
static void array_whole(struct vol *v, uint8_t *img, int to_array)
{
    if (v->depth == 1) {
        CUDA_MEMCPY2D c;
        memset(&c, 0, sizeof c);
        if (to_array) {
            c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = img, c.srcPitch = v->pitch;
            c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = v->arr;
        } else {
            c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = v->arr;
            c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = img, c.dstPitch = v->pitch;
        }
        c.WidthInBytes = v->pitch;
        c.Height = v->rows;
        CHECK(cuMemcpy2D(&c));
    } else {
        CUDA_MEMCPY3D c;
        memset(&c, 0, sizeof c);
        if (to_array) {
            c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = img, c.srcPitch = v->pitch;
            c.srcHeight = v->rows;
            c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = v->arr;
        } else {
            c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = v->arr;
            c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = img, c.dstPitch = v->pitch;
            c.dstHeight = v->rows;
        }
        c.WidthInBytes = v->pitch;
        c.Height = v->rows;
        c.Depth = v->depth;
        CHECK(cuMemcpy3D(&c));
    }
}

/* Sets the whole content of v from img (v->bytes bytes). */
static void vol_put(struct vol *v, uint8_t *img)
{
    if (v->kind == V_DEVICE)
        CHECK(cuMemcpyHtoD(v->dev, img, v->bytes));
    else if (v->kind == V_ARRAY)
        array_whole(v, img, 1);
    else
        memcpy(v->host, img, v->bytes);
}

/* Reads the whole content of v into img. */
static void vol_get(struct vol *v, uint8_t *img)
{
    if (v->kind == V_DEVICE)
        CHECK(cuMemcpyDtoH(img, v->dev, v->bytes));
    else if (v->kind == V_ARRAY)
        array_whole(v, img, 0);
    else
        memcpy(img, v->host, v->bytes);
}

/* Fills the src* or dst* fields (prefix `pfx`) of a CUDA_MEMCPY2D/3D for volume v. */
#define SET_SIDE(c, pfx, v)                                                                        \
    do {                                                                                           \
        if ((v)->kind == V_ARRAY) {                                                                \
            (c)->pfx##MemoryType = CU_MEMORYTYPE_ARRAY;                                            \
            (c)->pfx##Array = (v)->arr;                                                            \
            break;                                                                                 \
        }                                                                                          \
        (c)->pfx##Pitch = (v)->pitch;                                                              \
        if ((v)->unified) {                                                                        \
            (c)->pfx##MemoryType = CU_MEMORYTYPE_UNIFIED;                                          \
            (c)->pfx##Device =                                                                     \
                (v)->kind == V_DEVICE ? (v)->dev : (CUdeviceptr)(uintptr_t)(v)->host;              \
        } else if ((v)->kind == V_DEVICE) {                                                        \
            (c)->pfx##MemoryType = CU_MEMORYTYPE_DEVICE;                                           \
            (c)->pfx##Device = (v)->dev;                                                           \
        } else {                                                                                   \
            (c)->pfx##MemoryType = CU_MEMORYTYPE_HOST;                                             \
            (c)->pfx##Host = (v)->host;                                                            \
        }                                                                                          \
    } while (0)

enum cmethod { M_2D, M_2D_UNALIGNED, M_2D_ASYNC, M_3D, M_3D_ASYNC };
static const char *const method_name[] = {"cuMemcpy2D", "cuMemcpy2DUnaligned", "cuMemcpy2DAsync",
                                          "cuMemcpy3D", "cuMemcpy3DAsync"};

/* Source offset, destination offset (x in bytes, y, z) and extent (bytes, rows, slices). */
struct box {
    size_t sx, sy, sz, dx, dy, dz, w, h, d;
};

static void run_copy(enum cmethod m, struct vol *src, struct vol *dst, const struct box *b)
{
    if (m == M_2D || m == M_2D_UNALIGNED || m == M_2D_ASYNC) {
        CUDA_MEMCPY2D c;
        memset(&c, 0, sizeof c);
        SET_SIDE(&c, src, src);
        SET_SIDE(&c, dst, dst);
        c.srcXInBytes = b->sx, c.srcY = b->sy;
        c.dstXInBytes = b->dx, c.dstY = b->dy;
        c.WidthInBytes = b->w, c.Height = b->h;
        if (m == M_2D)
            CHECK(cuMemcpy2D(&c));
        else if (m == M_2D_UNALIGNED)
            CHECK(cuMemcpy2DUnaligned(&c));
        else
            CHECK(cuMemcpy2DAsync(&c, g_stream));
    } else {
        CUDA_MEMCPY3D c;
        memset(&c, 0, sizeof c);
        SET_SIDE(&c, src, src);
        SET_SIDE(&c, dst, dst);
        if (src->kind != V_ARRAY) c.srcHeight = src->rows;
        if (dst->kind != V_ARRAY) c.dstHeight = dst->rows;
        c.srcXInBytes = b->sx, c.srcY = b->sy, c.srcZ = b->sz;
        c.dstXInBytes = b->dx, c.dstY = b->dy, c.dstZ = b->dz;
        c.WidthInBytes = b->w, c.Height = b->h, c.Depth = b->d;
        if (m == M_3D)
            CHECK(cuMemcpy3D(&c));
        else
            CHECK(cuMemcpy3DAsync(&c, g_stream));
    }
    if (m == M_2D_ASYNC || m == M_3D_ASYNC) CHECK(cuStreamSynchronize(g_stream));
}

/* One copy of box b from src to dst: both filled with distinct patterns first, then the
 * whole of dst read back and compared with the expected image. */
static void copy_case(enum cmethod m, struct vol *src, struct vol *dst, const struct box *b)
{
    uint8_t *simg = xmalloc(src->bytes), *want = xmalloc(dst->bytes), *got = xmalloc(dst->bytes);
    t_fill_pattern(simg, src->bytes, new_seed());
    t_fill_pattern(want, dst->bytes, new_seed());
    vol_put(src, simg);
    vol_put(dst, want);

    run_copy(m, src, dst, b);
    vol_get(dst, got);

    for (size_t z = 0; z < b->d; z++)
        for (size_t y = 0; y < b->h; y++)
            memcpy(want + ((b->dz + z) * dst->rows + b->dy + y) * dst->pitch + b->dx,
                   simg + ((b->sz + z) * src->rows + b->sy + y) * src->pitch + b->sx, b->w);
    if (memcmp(got, want, dst->bytes) != 0) {
        size_t i = 0;
        while (got[i] == want[i])
            i++;
        size_t slice = dst->pitch * dst->rows;
        t_fail(__FILE__, __LINE__,
               "%s %s -> %s: byte (x %zu, y %zu, z %zu) is 0x%02x, expected 0x%02x", method_name[m],
               src->name, dst->name, i % dst->pitch, i % slice / dst->pitch, i / slice, got[i],
               want[i]);
    }
    t_ok("%s %s -> %s", method_name[m], src->name, dst->name);
    free(simg);
    free(want);
    free(got);
}

static void copies_2d(void)
{
    struct vol pg, pg2, pin, dev, dev2, upin, udev, arr, arr2;
    vol_init(&pg, "pageable", V_PAGEABLE, 301, 40, 1);
    vol_init(&pg2, "pageable2", V_PAGEABLE, 211, 33, 1);
    vol_init(&pin, "pinned", V_PINNED, 257, 37, 1);
    vol_init(&dev, "device", V_DEVICE, 301, 40, 1);
    vol_init(&dev2, "device2", V_DEVICE, 123, 29, 1);
    vol_init(&upin, "unified-pinned", V_PINNED, 203, 31, 1);
    upin.unified = 1;
    vol_init(&udev, "unified-device", V_DEVICE, 222, 30, 1);
    udev.unified = 1;
    vol_init(&arr, "array", V_ARRAY, 160, 24, 1);
    vol_init(&arr2, "array2", V_ARRAY, 96, 20, 1);

    /* Odd offsets and width where no array is involved; array x offsets and widths are
     * multiples of the 4-byte element, as the API requires. */
    const struct box plain = {3, 2, 0, 5, 1, 0, 37, 19, 1};
    const struct box to_arr = {3, 2, 0, 8, 1, 0, 36, 11, 1};
    const struct box from_arr = {8, 3, 0, 5, 2, 0, 40, 9, 1};
    const struct box dev_arr = {4, 3, 0, 12, 2, 0, 44, 10, 1};
    const struct box arr_arr = {12, 2, 0, 4, 5, 0, 52, 13, 1};

    copy_case(M_2D, &pg, &dev, &plain);
    copy_case(M_2D, &dev, &pg, &plain);
    copy_case(M_2D, &pin, &dev, &plain);
    copy_case(M_2D, &dev, &pin, &plain);
    copy_case(M_2D, &dev, &dev2, &plain);
    copy_case(M_2D, &pg, &pg2, &plain);
    copy_case(M_2D, &pin, &pg, &plain);
    copy_case(M_2D, &upin, &udev, &plain);
    copy_case(M_2D, &udev, &upin, &plain);
    copy_case(M_2D, &udev, &dev, &plain);
    copy_case(M_2D_UNALIGNED, &dev, &dev2, &plain);
    copy_case(M_2D_UNALIGNED, &pg, &dev, &plain);
    copy_case(M_2D_UNALIGNED, &dev, &pin, &plain);
    copy_case(M_2D_ASYNC, &pin, &dev, &plain);
    copy_case(M_2D_ASYNC, &dev, &pin, &plain);
    copy_case(M_2D_ASYNC, &dev2, &dev, &plain);
    copy_case(M_2D_ASYNC, &upin, &udev, &plain);
    copy_case(M_2D, &pg, &arr, &to_arr);
    copy_case(M_2D, &arr, &pg, &from_arr);
    copy_case(M_2D, &pin, &arr, &to_arr);
    copy_case(M_2D, &arr, &pin, &from_arr);
    copy_case(M_2D, &dev, &arr, &dev_arr);
    copy_case(M_2D, &arr, &dev, &dev_arr);
    copy_case(M_2D, &arr, &arr2, &arr_arr);
    copy_case(M_2D_ASYNC, &pin, &arr, &to_arr);
    copy_case(M_2D_ASYNC, &arr, &pin, &from_arr);

    struct vol *all[] = {&pg, &pg2, &pin, &dev, &dev2, &upin, &udev, &arr, &arr2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vol_free(all[i]);
}

static void copies_3d(void)
{
    struct vol pg, pg2, pin, dev, dev2, arr;
    vol_init(&pg, "pageable-3d", V_PAGEABLE, 53, 7, 5);
    vol_init(&pg2, "pageable2-3d", V_PAGEABLE, 29, 8, 6);
    vol_init(&pin, "pinned-3d", V_PINNED, 41, 6, 5);
    vol_init(&dev, "device-3d", V_DEVICE, 64, 9, 6);
    vol_init(&dev2, "device2-3d", V_DEVICE, 37, 7, 4);
    vol_init(&arr, "array-3d", V_ARRAY, 48, 6, 5);

    const struct box plain = {2, 1, 1, 5, 3, 2, 13, 4, 3};
    const struct box small = {1, 2, 0, 3, 1, 1, 17, 3, 2}; /* fits every non-array volume */
    const struct box to_arr = {3, 1, 1, 8, 2, 1, 24, 4, 3};
    const struct box from_arr = {8, 2, 1, 3, 1, 1, 24, 4, 3};
    const struct box dev_arr = {4, 1, 1, 8, 2, 1, 24, 4, 3};

    copy_case(M_3D, &pg, &dev, &plain);
    copy_case(M_3D, &dev, &pg, &plain);
    copy_case(M_3D, &pin, &dev, &small);
    copy_case(M_3D, &dev, &pin, &small);
    copy_case(M_3D, &dev, &dev2, &small);
    copy_case(M_3D, &pg, &pg2, &small);
    copy_case(M_3D, &pg, &arr, &to_arr);
    copy_case(M_3D, &arr, &pg, &from_arr);
    copy_case(M_3D, &dev, &arr, &dev_arr);
    copy_case(M_3D, &arr, &dev, &dev_arr);
    copy_case(M_3D_ASYNC, &pin, &dev, &small);
    copy_case(M_3D_ASYNC, &dev, &pin, &small);
    copy_case(M_3D_ASYNC, &dev2, &dev, &small);
    copy_case(M_3D_ASYNC, &pin, &arr, &to_arr);

    struct vol *all[] = {&pg, &pg2, &pin, &dev, &dev2, &arr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vol_free(all[i]);
}

/* ------------------------------------------------------------------ 1D arrays */

#define ARR_ELEMS 4096
#define ARR_BYTES (ARR_ELEMS * 4)

/* Sets all of a 1D array from img, or reads all of it. */
static void arr_set(CUarray a, const uint8_t *img)
{
    CHECK(cuMemcpyHtoA(a, 0, img, ARR_BYTES));
}

static void arr_get(CUarray a, uint8_t *img)
{
    CHECK(cuMemcpyAtoH(img, a, 0, ARR_BYTES));
}

/* HtoA, AtoH, DtoA, AtoD, AtoA, HtoAAsync, AtoHAsync on 1D arrays; offsets and counts are
 * multiples of the 4-byte element. */
static void arrays_1d(void)
{
    CUarray a1, a2;
    CUDA_ARRAY_DESCRIPTOR d = {
        .Width = ARR_ELEMS, .Height = 0, .Format = CU_AD_FORMAT_UNSIGNED_INT32, .NumChannels = 1};
    CHECK(cuArrayCreate(&a1, &d));
    CHECK(cuArrayCreate(&a2, &d));
    uint8_t *bg = xmalloc(ARR_BYTES), *src = xmalloc(ARR_BYTES), *got = xmalloc(ARR_BYTES);
    uint8_t *pin_src, *pin_dst;
    CHECK(cuMemAllocHost((void **)&pin_src, ARR_BYTES));
    CHECK(cuMemAllocHost((void **)&pin_dst, ARR_BYTES));

    /* HtoA into the middle, then AtoH of the whole array and of a part. */
    t_fill_pattern(bg, ARR_BYTES, new_seed());
    t_fill_pattern(src, ARR_BYTES, new_seed());
    arr_set(a1, bg);
    CHECK(cuMemcpyHtoA(a1, 12, src, 4000));
    memcpy(bg + 12, src, 4000);
    arr_get(a1, got);
    need_same(got, bg, ARR_BYTES, "cuMemcpyHtoA");
    memset(got, 0, ARR_BYTES);
    CHECK(cuMemcpyAtoH(got, a1, 100, 2000));
    need_same(got, bg + 100, 2000, "cuMemcpyAtoH at an offset");
    t_ok("cuMemcpyHtoA/AtoH 1D array");

    /* DtoA from an offset in device memory. */
    t_fill_pattern(src, ARR_BYTES, new_seed());
    CHECK(cuMemcpyHtoD(g_d0, src, ARR_BYTES));
    CHECK(cuMemcpyDtoA(a1, 8, g_d0 + 16, 4092));
    memcpy(bg + 8, src + 16, 4092);
    arr_get(a1, got);
    need_same(got, bg, ARR_BYTES, "cuMemcpyDtoA");
    t_ok("cuMemcpyDtoA 1D array");

    /* AtoD into the middle of poisoned device memory. */
    CHECK(cuMemsetD8(g_d1, 0x77, 3000 + 64));
    CHECK(cuMemcpyAtoD(g_d1 + 4, a1, 20, 3000));
    CHECK(cuMemcpyDtoH(got, g_d1, 3000 + 64));
    need_window(got, 3000 + 64, 4, bg + 20, 3000, 0x77, "cuMemcpyAtoD");
    t_ok("cuMemcpyAtoD 1D array");

    /* AtoA between offsets of two arrays. */
    uint8_t *bg2 = xmalloc(ARR_BYTES);
    t_fill_pattern(bg2, ARR_BYTES, new_seed());
    arr_set(a2, bg2);
    CHECK(cuMemcpyAtoA(a2, 40, a1, 80, 8000));
    memcpy(bg2 + 40, bg + 80, 8000);
    arr_get(a2, got);
    need_same(got, bg2, ARR_BYTES, "cuMemcpyAtoA");
    t_ok("cuMemcpyAtoA 1D arrays");

    /* The async forms with pinned memory. */
    t_fill_pattern(pin_src, ARR_BYTES, new_seed());
    CHECK(cuMemcpyHtoAAsync(a2, 16, pin_src, 6000, g_stream));
    memset(pin_dst, 0, ARR_BYTES);
    CHECK(cuMemcpyAtoHAsync(pin_dst, a2, 0, ARR_BYTES, g_stream));
    CHECK(cuStreamSynchronize(g_stream));
    memcpy(bg2 + 16, pin_src, 6000);
    need_same(pin_dst, bg2, ARR_BYTES, "cuMemcpyHtoAAsync/AtoHAsync");
    t_ok("cuMemcpyHtoAAsync/AtoHAsync 1D array");

    CHECK(cuArrayDestroy(a1));
    CHECK(cuArrayDestroy(a2));
    CHECK(cuMemFreeHost(pin_src));
    CHECK(cuMemFreeHost(pin_dst));
    free(bg);
    free(bg2);
    free(src);
    free(got);
}

/* ------------------------------------------------------------------ memsets */

/* The 8/16/32-bit memset (2D when height > 0; else 1D over `width` elements) of `value` at
 * g_d0+off, sync or on g_stream; the whole surrounding range is read back and compared. */
static void memset_case(int esize, int twod, int async, size_t off, size_t pitch, size_t width,
                        size_t height, uint32_t value)
{
    static const char *const names[3][2][2] = {
        {{"cuMemsetD8", "cuMemsetD8Async"}, {"cuMemsetD2D8", "cuMemsetD2D8Async"}},
        {{"cuMemsetD16", "cuMemsetD16Async"}, {"cuMemsetD2D16", "cuMemsetD2D16Async"}},
        {{"cuMemsetD32", "cuMemsetD32Async"}, {"cuMemsetD2D32", "cuMemsetD2D32Async"}}};
    int ei = esize == 1 ? 0 : esize == 2 ? 1 : 2;
    const char *name = names[ei][twod][async];
    size_t rows = twod ? height : 1;
    size_t span = (rows - 1) * pitch + width * esize;
    size_t total = off + span + 67;
    REQUIRE(total <= g_dev_bytes, "memset case larger than the device buffer");
    char what[160];
    snprintf(what, sizeof what, "%s at +%zu, %zu elements x %zu rows", name, off, width, rows);

    uint8_t *want = xmalloc(total), *got = xmalloc(total);
    t_fill_pattern(want, total, new_seed());
    CHECK(cuMemcpyHtoD(g_d0, want, total));

    CUdeviceptr p = g_d0 + off;
    CUstream st = g_stream;
    CUresult r;
    if (!twod && esize == 1)
        r = async ? cuMemsetD8Async(p, (unsigned char)value, width, st)
                  : cuMemsetD8(p, (unsigned char)value, width);
    else if (!twod && esize == 2)
        r = async ? cuMemsetD16Async(p, (unsigned short)value, width, st)
                  : cuMemsetD16(p, (unsigned short)value, width);
    else if (!twod)
        r = async ? cuMemsetD32Async(p, value, width, st) : cuMemsetD32(p, value, width);
    else if (esize == 1)
        r = async ? cuMemsetD2D8Async(p, pitch, (unsigned char)value, width, height, st)
                  : cuMemsetD2D8(p, pitch, (unsigned char)value, width, height);
    else if (esize == 2)
        r = async ? cuMemsetD2D16Async(p, pitch, (unsigned short)value, width, height, st)
                  : cuMemsetD2D16(p, pitch, (unsigned short)value, width, height);
    else
        r = async ? cuMemsetD2D32Async(p, pitch, value, width, height, st)
                  : cuMemsetD2D32(p, pitch, value, width, height);
    if (r != CUDA_SUCCESS)
        t_fail(__FILE__, __LINE__, "%s returned %s (%d)", what, t_errname(r), (int)r);
    if (async) CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH(got, g_d0, total));

    for (size_t y = 0; y < rows; y++)
        for (size_t i = 0; i < width; i++)
            memcpy(want + off + y * pitch + i * esize, &value, esize); /* little-endian */
    need_same(got, want, total, what);
    t_ok("%s", what);
    free(want);
    free(got);
}

static void memsets(int quick)
{
    for (int async = 0; async < 2; async++) {
        memset_case(1, 0, async, 3, 0, 1, 0, 0xa7);
        memset_case(1, 0, async, 1, 0, 4093, 0, 0x5e);
        memset_case(1, 0, async, 5, 0, (1 << 20) + 1, 0, 0xa7);
        memset_case(2, 0, async, 2, 0, 1, 0, 0xbeef);
        memset_case(2, 0, async, 6, 0, 2047, 0, 0x1234);
        memset_case(2, 0, async, 10, 0, 300001, 0, 0xbeef);
        memset_case(4, 0, async, 4, 0, 1, 0, 0xdeadbeef);
        memset_case(4, 0, async, 12, 0, 1023, 0, 0x01020304);
        memset_case(4, 0, async, 20, 0, 262143, 0, 0xdeadbeef);
        memset_case(1, 1, async, 3, 1001, 37, 11, 0xa7);
        memset_case(2, 1, async, 6, 1002, 19, 7, 0xbeef);
        memset_case(4, 1, async, 12, 1004, 13, 5, 0xdeadbeef);
        memset_case(4, 1, async, 4, 4100, 1000, 200, 0xcafef00d);
        if (!quick) {
            memset_case(1, 0, async, 1, 0, (8 << 20) + 5, 0, 0x3c);
            memset_case(2, 0, async, 2, 0, (4 << 20) + 1, 0, 0xf00f);
        }
    }
    if (!quick) memset_case(1, 0, 0, 1, 0, (64 << 20) - 1, 0, 0x96);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    t_init("memcpy_all", 600);
    int quick = t_has_flag(argc, argv, "--quick");
    const size_t all_sizes[] = {1, 3, 4093, 65536 + 3, 1 << 20, (8 << 20) + 5, 64 << 20};
    size_t nsizes = quick ? 5 : 7, max = all_sizes[nsizes - 1];

    CUdevice dev;
    t_setup(&dev, &g_ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_write = t_get_function(mod, "write_pattern");
    f_check = t_get_function(mod, "check_pattern");
    CHECK(cuStreamCreate(&g_stream, 0));
    g_dev_bytes = max + SLACK;
    CHECK(cuMemAlloc(&g_d0, g_dev_bytes));
    CHECK(cuMemAlloc(&g_d1, g_dev_bytes));
    CHECK(cuMemAlloc(&g_errs, 4));
    CHECK(cuMemAllocHost((void **)&g_errs_host, 4));
    t_ok("setup");

    for (int k = 0; k < H_KINDS; k++) {
        uint8_t *src = h_alloc(k, max), *dst = h_alloc(k, max);
        for (size_t i = 0; i < nsizes; i++) {
            size_t n = all_sizes[i];
            lin_sync(k, src, dst, n);
            lin_async(k, src, dst, n, g_stream, "created stream");
            lin_async(k, src, dst, n, NULL, "NULL stream");
            lin_unified(k, src, dst, n, 0);
            lin_unified(k, src, dst, n, 1);
            if (k == H_PAGEABLE) lin_peer(src, dst, n);
        }
        h_free(k, src);
        h_free(k, dst);
    }

    const struct window windows[] = {
        {1, 0, 1}, {3, 5, 4093}, {7, 1, 65539}, {2, 3, 2}, {4093, 17, (1 << 20) - 7}};
    size_t wmax = (1 << 20) + 8192;
    uint8_t *src = xmalloc(wmax), *tmp = xmalloc(wmax), *psrc, *ptmp;
    CHECK(cuMemHostAlloc((void **)&psrc, wmax, 0));
    CHECK(cuMemHostAlloc((void **)&ptmp, wmax, 0));
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        unaligned_case(&windows[i], 0, src, tmp);
        unaligned_case(&windows[i], 1, psrc, ptmp);
    }
    free(src);
    free(tmp);
    CHECK(cuMemFreeHost(psrc));
    CHECK(cuMemFreeHost(ptmp));

    copies_2d();
    copies_3d();
    arrays_1d();
    memsets(quick);

    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree(g_d0));
    CHECK(cuMemFree(g_d1));
    CHECK(cuMemFree(g_errs));
    CHECK(cuMemFreeHost(g_errs_host));
    CHECK(cuStreamDestroy(g_stream));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
