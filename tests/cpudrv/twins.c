// CPU twins of the test kernels in tests/kernels/*.cu: each computes what its kernel
// computes for the launch's grid, block and arguments. Change both together.
//
// Kernels index with x only; the threads that differ only in y/z ("copies") repeat the
// same work, so a twin applies its x-work once per copy, in order (the deterministic
// interleaving of what would race on a GPU). Every pointer is checked before use: an
// address outside device-accessible memory is CUDA_ERROR_ILLEGAL_ADDRESS, a misaligned
// one CUDA_ERROR_MISALIGNED_ADDRESS, and both become the context's sticky error.
#include "cpudrv.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* Argument access by parameter index, from the function's layout. */

static uint64_t a64(const struct cpudrv_launch *L, unsigned i)
{
    uint64_t v;
    memcpy(&v, L->args + L->f->params[i].off, 8);
    return v;
}

static uint32_t a32(const struct cpudrv_launch *L, unsigned i)
{
    uint32_t v;
    memcpy(&v, L->args + L->f->params[i].off, 4);
    return v;
}

static int32_t ai32(const struct cpudrv_launch *L, unsigned i)
{
    int32_t v;
    memcpy(&v, L->args + L->f->params[i].off, 4);
    return v;
}

static float af32(const struct cpudrv_launch *L, unsigned i)
{
    float v;
    memcpy(&v, L->args + L->f->params[i].off, 4);
    return v;
}

static double af64(const struct cpudrv_launch *L, unsigned i)
{
    double v;
    memcpy(&v, L->args + L->f->params[i].off, 8);
    return v;
}

// Checks that count elements of size bytes at p (aligned to size) are reachable from a
// kernel; a count whose byte size overflows is an illegal address too.
static CUresult kmem(uint64_t p, uint64_t count, uint64_t size)
{
    if (!count) return CUDA_SUCCESS;
    if (p % size) return CUDA_ERROR_MISALIGNED_ADDRESS;
    if (count > SIZE_MAX / size) return CUDA_ERROR_ILLEGAL_ADDRESS;
    cpudrv_lock();
    CUresult rc = cpudrv_mem_check((uintptr_t)p, (size_t)(count * size));
    cpudrv_unlock();
    return rc ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

// Threads along x, and how many threads share each x index (y/z of grid and block).
static uint64_t xthreads(const struct cpudrv_launch *L)
{
    return (uint64_t)L->grid[0] * L->block[0];
}

static uint64_t copies(const struct cpudrv_launch *L)
{
    return (uint64_t)L->grid[1] * L->grid[2] * L->block[1] * L->block[2];
}

// Elements a non-grid-stride kernel touches: int i = blockIdx.x * blockDim.x + threadIdx.x
// with i < n.
static uint64_t covered(const struct cpudrv_launch *L, int32_t n)
{
    if (n <= 0) return 0;
    uint64_t t = xthreads(L);
    return t < (uint64_t)n ? t : (uint64_t)n;
}

static CUresult empty_kernel(const struct cpudrv_launch *L)
{
    (void)L;
    return CUDA_SUCCESS;
}

static CUresult vec_add(const struct cpudrv_launch *L)
{
    uint64_t m = covered(L, ai32(L, 3));
    const float *a = (const float *)(uintptr_t)a64(L, 0), *b = (const float *)(uintptr_t)a64(L, 1);
    float *c = (float *)(uintptr_t)a64(L, 2);
    CUresult rc = kmem((uintptr_t)a, m, 4);
    if (!rc) rc = kmem((uintptr_t)b, m, 4);
    if (!rc) rc = kmem((uintptr_t)c, m, 4);
    for (uint64_t r = 0; !rc && r < copies(L); r++)
        for (uint64_t i = 0; i < m; i++)
            c[i] = a[i] + b[i];
    return rc;
}

static CUresult saxpy(const struct cpudrv_launch *L)
{
    float alpha = af32(L, 0);
    uint64_t m = covered(L, ai32(L, 3));
    const float *x = (const float *)(uintptr_t)a64(L, 1);
    float *y = (float *)(uintptr_t)a64(L, 2);
    CUresult rc = kmem((uintptr_t)x, m, 4);
    if (!rc) rc = kmem((uintptr_t)y, m, 4);
    for (uint64_t r = 0; !rc && r < copies(L); r++)
        for (uint64_t i = 0; i < m; i++)
            y[i] = fmaf(alpha, x[i], y[i]); // nvcc contracts a*x+y into fma.rn.f32
    return rc;
}

// Grid-stride loops cover every i < n whenever the grid has at least one thread.
static CUresult fill_u32(const struct cpudrv_launch *L)
{
    uint32_t *p = (uint32_t *)(uintptr_t)a64(L, 0), v = a32(L, 1);
    uint64_t n = a64(L, 2);
    CUresult rc = kmem((uintptr_t)p, n, 4);
    for (uint64_t i = 0; !rc && i < n; i++)
        p[i] = v;
    return rc;
}

static CUresult inc_u32(const struct cpudrv_launch *L)
{
    uint32_t *p = (uint32_t *)(uintptr_t)a64(L, 0);
    uint64_t n = a64(L, 1);
    uint32_t k = (uint32_t)copies(L);
    CUresult rc = kmem((uintptr_t)p, n, 4);
    for (uint64_t i = 0; !rc && i < n; i++)
        p[i] += k;
    return rc;
}

static CUresult mul_add_i32(const struct cpudrv_launch *L)
{
    uint32_t *p = (uint32_t *)(uintptr_t)a64(L, 0); // int arithmetic wraps on the GPU
    uint32_t mul = a32(L, 1), add = a32(L, 2);
    uint64_t n = a64(L, 3);
    CUresult rc = kmem((uintptr_t)p, n, 4);
    for (uint64_t r = 0; !rc && r < copies(L); r++)
        for (uint64_t i = 0; i < n; i++)
            p[i] = p[i] * mul + add;
    return rc;
}

static CUresult param_mix(const struct cpudrv_launch *L)
{
    signed char c = (signed char)L->args[L->f->params[0].off];
    int16_t s;
    memcpy(&s, L->args + L->f->params[2].off, 2);
    double *out = (double *)(uintptr_t)a64(L, 6);
    CUresult rc = kmem((uintptr_t)out, 6, 8);
    if (rc) return rc;
    out[0] = c;
    out[1] = af64(L, 1);
    out[2] = s;
    out[3] = ai32(L, 3);
    out[4] = (double)a64(L, 4);
    out[5] = af32(L, 5);
    return CUDA_SUCCESS;
}

// struct mix { char tag; double val; int arr[3]; }: tag at 0, val at 8, arr at 16.
static CUresult struct_param(const struct cpudrv_launch *L)
{
    const unsigned char *m = L->args + L->f->params[0].off;
    double *out = (double *)(uintptr_t)a64(L, 1);
    CUresult rc = kmem((uintptr_t)out, 5, 8);
    if (rc) return rc;
    double val;
    int32_t arr[3];
    memcpy(&val, m + 8, 8);
    memcpy(arr, m + 16, 12);
    out[0] = (signed char)m[0];
    out[1] = val;
    for (int i = 0; i < 3; i++)
        out[2 + i] = arr[i];
    return CUDA_SUCCESS;
}

// A module global, or NULL when the module does not define it with at least n bytes.
static unsigned char *global(const struct cpudrv_launch *L, const char *name, size_t n)
{
    size_t size;
    unsigned char *p = cpudrv_module_global(L->mod, name, &size);
    return p && size >= n ? p : NULL;
}

static CUresult globals_read(const struct cpudrv_launch *L)
{
    float *out = (float *)(uintptr_t)a64(L, 0);
    uint64_t m = covered(L, ai32(L, 1));
    const unsigned char *table = global(L, "g_table", m * 4);
    const unsigned char *off = global(L, "g_offset", 4);
    if (!table || !off) // reading past g_table is not modelled: treated as a fault
        return m ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
    CUresult rc = kmem((uintptr_t)out, m, 4);
    float o;
    memcpy(&o, off, 4);
    for (uint64_t i = 0; !rc && i < m; i++) {
        float t;
        memcpy(&t, table + i * 4, 4);
        out[i] = fmaf(t, 2.0f, o);
    }
    return rc;
}

static CUresult global_counter_bump(const struct cpudrv_launch *L)
{
    unsigned char *p = global(L, "g_counter", 4);
    if (!p) return CUDA_ERROR_ILLEGAL_ADDRESS;
    uint64_t threads = xthreads(L) * copies(L);
    __atomic_fetch_add((uint32_t *)(void *)p, (uint32_t)threads, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

// tests/kernels/managed.cu: the module's __managed__ variables (and a plain global).
#define MV_LEN 256

static CUresult mv_add(const struct cpudrv_launch *L)
{
    unsigned char *count = global(L, "mv_count", 4), *arr = global(L, "mv_arr", MV_LEN * 4);
    if (!count || !arr) return CUDA_ERROR_ILLEGAL_ADDRESS;
    int32_t v = ai32(L, 0);
    uint64_t n = xthreads(L) ? MV_LEN : 0;
    for (uint64_t r = 0; r < copies(L); r++) {
        int32_t c;
        memcpy(&c, count, 4);
        c = (int32_t)((uint32_t)c + (uint32_t)v);
        memcpy(count, &c, 4);
        for (uint64_t i = 0; i < n; i++) {
            uint32_t e;
            memcpy(&e, arr + i * 4, 4);
            e += (uint32_t)v + (uint32_t)i;
            memcpy(arr + i * 4, &e, 4);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult mv_read(const struct cpudrv_launch *L)
{
    const unsigned char *count = global(L, "mv_count", 4), *arr = global(L, "mv_arr", MV_LEN * 4);
    const unsigned char *init = global(L, "mv_init", 4), *plain = global(L, "mv_plain", 4);
    if (!count || !arr || !init || !plain) return CUDA_ERROR_ILLEGAL_ADDRESS;
    uint32_t *out = (uint32_t *)(uintptr_t)a64(L, 0);
    CUresult rc = kmem((uintptr_t)out, MV_LEN + 2, 4);
    uint32_t c;
    memcpy(&c, count, 4);
    for (uint64_t i = 0; !rc && i < MV_LEN; i++) {
        memcpy(&out[i], arr + i * 4, 4);
        out[i] += c;
    }
    if (!rc) {
        memcpy(&out[MV_LEN], init, 4);
        memcpy(&out[MV_LEN + 1], plain, 4);
    }
    return rc;
}

// tests/kernels/managed2.cu.
static CUresult mv2_accumulate(const struct cpudrv_launch *L)
{
    unsigned char *total = global(L, "mv2_total", 8);
    const unsigned char *scale = global(L, "mv2_scale", 4);
    if (!total || !scale) return CUDA_ERROR_ILLEGAL_ADDRESS;
    const uint32_t *in = (const uint32_t *)(uintptr_t)a64(L, 0);
    int32_t n = ai32(L, 1);
    CUresult rc = kmem((uintptr_t)in, n > 0 ? (uint64_t)n : 0, 4);
    int64_t s = 0, t;
    int32_t k;
    for (int32_t i = 0; !rc && i < n; i++)
        s += in[i];
    memcpy(&k, scale, 4);
    memcpy(&t, total, 8);
    for (uint64_t r = 0; !rc && r < copies(L); r++)
        t += s * k;
    if (!rc) memcpy(total, &t, 8);
    return rc;
}

// Per block: load blockDim.x elements into shared memory, then the tree reduction exactly
// as written (so a block size that is not a power of 2 loses elements, as on the GPU).
static CUresult block_sum(const struct cpudrv_launch *L)
{
    const int32_t *in = (const int32_t *)(uintptr_t)a64(L, 0);
    int64_t *out = (int64_t *)(uintptr_t)a64(L, 1);
    int32_t n = ai32(L, 2);
    unsigned bd = L->block[0];
    if ((uint64_t)L->shmem < (uint64_t)bd * 8) // sdata[threadIdx.x] beyond the allocation
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    CUresult rc = kmem((uintptr_t)in, covered(L, n), 4);
    if (!rc) rc = kmem((uintptr_t)out, (uint64_t)L->grid[0], 8);
    int64_t sdata[1024];
    for (uint64_t bx = 0; !rc && bx < L->grid[0]; bx++) {
        for (unsigned t = 0; t < bd; t++) {
            uint64_t i = bx * bd + t;
            sdata[t] = i < (uint64_t)(n > 0 ? n : 0) ? in[i] : 0;
        }
        for (unsigned s = bd / 2; s > 0; s >>= 1)
            for (unsigned t = 0; t < s; t++)
                sdata[t] += sdata[t + s];
        out[bx] = sdata[0];
    }
    return rc;
}

static CUresult delay_set(const struct cpudrv_launch *L)
{
    uint32_t *flag = (uint32_t *)(uintptr_t)a64(L, 0), v = a32(L, 1);
    uint64_t ns = a64(L, 2);
    CUresult rc = kmem((uintptr_t)flag, 1, 4);
    if (rc) return rc;
    // Sleep in slices so that a context being torn down does not wait for a long delay.
    uint64_t end = cpudrv_now_ns() + ns;
    for (uint64_t now = cpudrv_now_ns(); now < end; now = cpudrv_now_ns()) {
        if (__atomic_load_n(L->dying, __ATOMIC_ACQUIRE)) return CUDA_SUCCESS;
        uint64_t left = end - now < 10000000u ? end - now : 10000000u;
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
    __atomic_store_n(flag, v, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

static CUresult await_u32(const struct cpudrv_launch *L)
{
    const uint32_t *flag = (const uint32_t *)(uintptr_t)a64(L, 0);
    uint32_t v = a32(L, 1), *out = (uint32_t *)(uintptr_t)a64(L, 3);
    uint64_t ns = a64(L, 2);
    CUresult rc = kmem((uintptr_t)flag, 1, 4);
    if (!rc) rc = kmem((uintptr_t)out, 1, 4);
    if (rc) return rc;
    // Polls in 100 us slices (another stream's work stores the flag on its own thread).
    uint64_t end = cpudrv_now_ns() + ns;
    uint32_t seen = 0;
    for (;;) {
        seen = __atomic_load_n(flag, __ATOMIC_ACQUIRE) == v;
        if (seen || cpudrv_now_ns() >= end || __atomic_load_n(L->dying, __ATOMIC_ACQUIRE)) break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    __atomic_store_n(out, seen ? 1u : 2u, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

static CUresult copy_u8(const struct cpudrv_launch *L)
{
    const unsigned char *src = (const unsigned char *)(uintptr_t)a64(L, 0);
    unsigned char *dst = (unsigned char *)(uintptr_t)a64(L, 1);
    uint64_t n = a64(L, 2);
    CUresult rc = kmem((uintptr_t)src, n, 1);
    if (!rc) rc = kmem((uintptr_t)dst, n, 1);
    if (!rc) memmove(dst, src, n);
    return rc;
}

static uint32_t pattern_at(uint32_t seed, uint64_t i)
{
    return (uint32_t)(i * 2654435761ull) ^ seed;
}

static CUresult write_pattern(const struct cpudrv_launch *L)
{
    uint32_t *p = (uint32_t *)(uintptr_t)a64(L, 0);
    uint64_t n = a64(L, 1);
    uint32_t seed = a32(L, 2);
    CUresult rc = kmem((uintptr_t)p, n, 4);
    for (uint64_t i = 0; !rc && i < n; i++)
        p[i] = pattern_at(seed, i);
    return rc;
}

static CUresult check_pattern(const struct cpudrv_launch *L)
{
    const uint32_t *p = (const uint32_t *)(uintptr_t)a64(L, 0);
    uint64_t n = a64(L, 1);
    uint32_t seed = a32(L, 2);
    uint32_t *errors = (uint32_t *)(uintptr_t)a64(L, 3);
    CUresult rc = kmem((uintptr_t)p, n, 4);
    if (!rc) rc = kmem((uintptr_t)errors, 1, 4);
    uint32_t bad = 0;
    for (uint64_t i = 0; !rc && i < n; i++)
        bad += p[i] != pattern_at(seed, i);
    if (!rc && bad) __atomic_fetch_add(errors, bad * (uint32_t)copies(L), __ATOMIC_RELAXED);
    return rc;
}

// kernels2.cu
static CUresult negate_i32(const struct cpudrv_launch *L)
{
    uint32_t *p = (uint32_t *)(uintptr_t)a64(L, 0);
    uint64_t m = covered(L, ai32(L, 1));
    CUresult rc = kmem((uintptr_t)p, m, 4);
    for (uint64_t r = 0; !rc && r < copies(L); r++)
        for (uint64_t i = 0; i < m; i++)
            p[i] = 0u - p[i];
    return rc;
}

// cond.cu: what cudaGraphSetConditional sets is the running graph launch's (graphexec.c).
static CUresult set_cond(const struct cpudrv_launch *L)
{
    const uint32_t *v = (const uint32_t *)(uintptr_t)a64(L, 1);
    CUresult rc = xthreads(L) ? kmem((uintptr_t)v, 1, 4) : CUDA_SUCCESS;
    if (!rc && xthreads(L)) cpudrv_cond_set(a64(L, 0), *v);
    return rc;
}

static CUresult countdown(const struct cpudrv_launch *L)
{
    uint32_t *c = (uint32_t *)(uintptr_t)a64(L, 1);
    CUresult rc = xthreads(L) ? kmem((uintptr_t)c, 1, 4) : CUDA_SUCCESS;
    if (!rc && xthreads(L)) {
        if (*c) (*c)--;
        cpudrv_cond_set(a64(L, 0), *c != 0);
    }
    return rc;
}

// texture.cu: texture and surface access goes through texture.c, which checks each handle
// and element (a texture of a kind it does not model faults).
static CUresult tex_stencil(const struct cpudrv_launch *L)
{
    uint64_t src = a64(L, 0), dst = a64(L, 1);
    int32_t w = ai32(L, 2), h = ai32(L, 3);
    uint64_t xs = xthreads(L), ys = (uint64_t)L->grid[1] * L->block[1];
    uint64_t zs = (uint64_t)L->grid[2] * L->block[2];
    uint64_t mx = w <= 0 ? 0 : xs < (uint64_t)w ? xs : (uint64_t)w;
    uint64_t my = h <= 0 ? 0 : ys < (uint64_t)h ? ys : (uint64_t)h;
    CUresult rc = CUDA_SUCCESS;
    for (uint64_t z = 0; !rc && z < zs; z++)
        for (uint64_t y = 0; !rc && y < my; y++)
            for (uint64_t x = 0; !rc && x < mx; x++) {
                float c, l, r, u, d;
                int64_t ix = (int64_t)x, iy = (int64_t)y;
                rc = cpudrv_tex_read_f32(src, ix, iy, &c);
                if (!rc) rc = cpudrv_tex_read_f32(src, ix - 1, iy, &l);
                if (!rc) rc = cpudrv_tex_read_f32(src, ix + 1, iy, &r);
                if (!rc) rc = cpudrv_tex_read_f32(src, ix, iy - 1, &u);
                if (!rc) rc = cpudrv_tex_read_f32(src, ix, iy + 1, &d);
                if (!rc) rc = cpudrv_surf_write_f32(dst, ix * 4, iy, l + r + u + d - 4.0f * c);
            }
    return rc;
}

static CUresult tex_fetch_double(const struct cpudrv_launch *L)
{
    uint64_t src = a64(L, 0);
    float *out = (float *)(uintptr_t)a64(L, 1);
    uint64_t m = covered(L, ai32(L, 2));
    CUresult rc = kmem((uintptr_t)out, m, 4);
    for (uint64_t r = 0; !rc && r < copies(L); r++)
        for (uint64_t i = 0; !rc && i < m; i++) {
            float v;
            rc = cpudrv_tex_fetch_f32(src, (int64_t)i, &v);
            if (!rc) out[i] = 2.0f * v;
        }
    return rc;
}

// tests/cudart/tma.cu's kernel: block b loads the 2D box at origins[b] of the tiled map (a
// TMA load: elements past the tensor's edge are zero) and writes it to out[b].
static CUresult tma_tiles(const struct cpudrv_launch *L)
{
    struct cpudrv_tmap t;
    const int32_t *org = (const int32_t *)(uintptr_t)a64(L, 1);
    unsigned char *out = (unsigned char *)(uintptr_t)a64(L, 2);
    if (cpudrv_tmap_read(L->args + L->f->params[0].off, &t) || t.rank != 2 || !t.esize)
        return CUDA_ERROR_ILLEGAL_INSTRUCTION;
    uint64_t tile = (uint64_t)t.box[0] * t.box[1] * t.esize;
    CUresult rc = kmem((uintptr_t)org, 2ull * L->grid[0], 4);
    if (!rc) rc = kmem((uintptr_t)out, L->grid[0], tile);
    for (unsigned b = 0; !rc && b < L->grid[0]; b++)
        for (unsigned y = 0; !rc && y < t.box[1]; y++)
            for (unsigned x = 0; !rc && x < t.box[0]; x++) {
                int64_t gx = (int64_t)org[2 * b] + x, gy = (int64_t)org[2 * b + 1] + y;
                unsigned char *dst = out + b * tile + ((uint64_t)y * t.box[0] + x) * t.esize;
                memset(dst, 0, t.esize);
                if (gx < 0 || gy < 0 || (uint64_t)gx >= t.dims[0] || (uint64_t)gy >= t.dims[1])
                    continue;
                uint64_t src = t.addr + (uint64_t)gy * t.strides[0] + (uint64_t)gx * t.esize;
                if (!(rc = kmem(src, 1, t.esize)))
                    memcpy(dst, (const void *)(uintptr_t)src, t.esize);
            }
    return rc;
}

// Parameter sizes and alignments as the PTX declares them (used for cubins whose layout
// cannot be read, and to reject a kernel that has the name but not the signature).
#define P(...) __VA_ARGS__
static const struct cpudrv_twin twins[] = {
    {"empty_kernel", 0, {0}, {0}, empty_kernel},
    {"vec_add", 4, {P(8, 8, 8, 4)}, {P(8, 8, 8, 4)}, vec_add},
    {"saxpy", 4, {P(4, 8, 8, 4)}, {P(4, 8, 8, 4)}, saxpy},
    {"fill_u32", 3, {P(8, 4, 8)}, {P(8, 4, 8)}, fill_u32},
    {"inc_u32", 2, {P(8, 8)}, {P(8, 8)}, inc_u32},
    {"mul_add_i32", 4, {P(8, 4, 4, 8)}, {P(8, 4, 4, 8)}, mul_add_i32},
    {"param_mix", 7, {P(1, 8, 2, 4, 8, 4, 8)}, {P(1, 8, 2, 4, 8, 4, 8)}, param_mix},
    {"struct_param", 2, {P(32, 8)}, {P(8, 8)}, struct_param},
    {"globals_read", 2, {P(8, 4)}, {P(8, 4)}, globals_read},
    {"global_counter_bump", 0, {0}, {0}, global_counter_bump},
    {"block_sum", 3, {P(8, 8, 4)}, {P(8, 8, 4)}, block_sum},
    {"delay_set", 3, {P(8, 4, 8)}, {P(8, 4, 8)}, delay_set},
    {"await_u32", 4, {P(8, 4, 8, 8)}, {P(8, 4, 8, 8)}, await_u32},
    {"copy_u8", 3, {P(8, 8, 8)}, {P(8, 8, 8)}, copy_u8},
    {"write_pattern", 3, {P(8, 8, 4)}, {P(8, 8, 4)}, write_pattern},
    {"check_pattern", 4, {P(8, 8, 4, 8)}, {P(8, 8, 4, 8)}, check_pattern},
    {"negate_i32", 2, {P(8, 4)}, {P(8, 4)}, negate_i32},
    {"tex_stencil", 4, {P(8, 8, 4, 4)}, {P(8, 8, 4, 4)}, tex_stencil},
    {"tex_fetch_double", 3, {P(8, 8, 4)}, {P(8, 8, 4)}, tex_fetch_double},
    {"set_cond", 2, {P(8, 8)}, {P(8, 8)}, set_cond},
    {"countdown", 2, {P(8, 8)}, {P(8, 8)}, countdown},
    {"mv_add", 1, {P(4)}, {P(4)}, mv_add},
    {"mv_read", 1, {P(8)}, {P(8)}, mv_read},
    {"mv2_accumulate", 2, {P(8, 4)}, {P(8, 4)}, mv2_accumulate},
    {"tma_tiles", 3, {P(128, 8, 8)}, {P(128, 8, 8)}, tma_tiles},
};
#undef P

// The CPU twin of a kernel, or NULL.
const struct cpudrv_twin *cpudrv_twin_find(const char *name)
{
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++)
        if (strcmp(twins[i].name, name) == 0) return &twins[i];
    return NULL;
}
