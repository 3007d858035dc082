/* managed_vars: __managed__ variables through the driver API, and the batch prefetch and
 * discard calls. tests/kernels/managed.cu, loaded from managed.fatbin as two modules and a
 * library, holds the variables: the host writes them and a kernel reads them, a kernel
 * writes them and the host reads them after each kind of synchronisation, one kernel writes
 * and the next reads with no synchronisation between, copies and memsets name them, each
 * module and the library has variables of its own, and prefetches, advice and stream
 * attachment take them. The batches are checked with good ranges; with --bad-batches
 * (through the shim only) with bad ones too (device, pinned and pageable memory, another
 * process's managed memory, sizes that leave their memory or wrap, bad counts, indices,
 * locations, flags and streams), which the real driver does not refuse safely. With
 * --threads, four
 * threads each load a module of their own and take turns with the device on its variables,
 * synchronising each way, while the others push, pull and unload theirs. With --hold it looks
 * its variables up, uses them, prints `ready` and sleeps, for a test that kills it. Same
 * output natively and through the shim. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MV_LEN 256
#define OUT_LEN (MV_LEN + 2)

/* One instance of managed.cu's variables (a module's or the library's) and its kernels. */
struct vars {
    CUfunction add, read;
    CUdeviceptr d_count, d_arr, d_init, d_plain;
    int *count, *init;
    unsigned *arr;
};

static CUdeviceptr global(CUresult (*get)(CUdeviceptr *, size_t *, void *, const char *),
                          void *owner, const char *name, size_t want)
{
    CUdeviceptr d = 0;
    size_t bytes = 0;
    CHECK(get(&d, &bytes, owner, name));
    REQUIRE(d != 0 && bytes == want, "%s: %zu bytes, want %zu", name, bytes, want);
    return d;
}

static CUresult module_global(CUdeviceptr *d, size_t *b, void *m, const char *name)
{
    return cuModuleGetGlobal(d, b, (CUmodule)m, name);
}

static CUresult library_managed(CUdeviceptr *d, size_t *b, void *l, const char *name)
{
    return cuLibraryGetManaged(d, b, (CUlibrary)l, name);
}

static void bind(struct vars *v, CUresult (*get)(CUdeviceptr *, size_t *, void *, const char *),
                 void *owner)
{
    v->d_count = global(get, owner, "mv_count", 4);
    v->d_arr = global(get, owner, "mv_arr", MV_LEN * 4);
    v->d_init = global(get, owner, "mv_init", 4);
    v->count = (int *)(uintptr_t)v->d_count;
    v->arr = (unsigned *)(uintptr_t)v->d_arr;
    v->init = (int *)(uintptr_t)v->d_init;
}

static void load_module(struct vars *v, CUmodule *mod)
{
    *mod = t_load_module("managed.fatbin");
    v->add = t_get_function(*mod, "mv_add");
    v->read = t_get_function(*mod, "mv_read");
    bind(v, module_global, *mod);
    size_t bytes = 0;
    CHECK(cuModuleGetGlobal(&v->d_plain, &bytes, *mod, "mv_plain"));
}

static void add(const struct vars *v, int val, CUstream s)
{
    void *params[] = {&val};
    CHECK(cuLaunchKernel(v->add, 2, 1, 1, 64, 1, 1, 0, s, params, NULL));
}

static void read_into(const struct vars *v, CUdeviceptr out, CUstream s)
{
    void *params[] = {&out};
    CHECK(cuLaunchKernel(v->read, 2, 1, 1, 64, 1, 1, 0, s, params, NULL));
}

/* The host's view of v must be: count, and arr[i] = base + step * i. */
static void expect_vars(const struct vars *v, int count, unsigned base, unsigned step,
                        const char *when)
{
    REQUIRE(*v->count == count, "%s: mv_count %d, want %d", when, *v->count, count);
    for (unsigned i = 0; i < MV_LEN; i++)
        REQUIRE(v->arr[i] == base + step * i, "%s: mv_arr[%u] = %u, want %u", when, i, v->arr[i],
                base + step * i);
}

/* mv_read's output, copied back: arr[i] + count = base + step * i; then init and plain. */
static void expect_out(CUdeviceptr out, unsigned base, unsigned step, const char *when)
{
    unsigned h[OUT_LEN];
    CHECK(cuMemcpyDtoH(h, out, sizeof(h)));
    for (unsigned i = 0; i < MV_LEN; i++)
        REQUIRE(h[i] == base + step * i, "%s: out[%u] = %u, want %u", when, i, h[i],
                base + step * i);
    REQUIRE(h[MV_LEN] == 1234 && h[MV_LEN + 1] == 0, "%s: mv_init %u, mv_plain %u", when, h[MV_LEN],
            h[MV_LEN + 1]);
}

static int last_prefetch(CUdeviceptr p, size_t n)
{
    int v = 12345;
    CHECK(
        cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, n));
    return v;
}

/* ---------------------------------------------------------------- another process */

/* A process of its own (forked before this one initialises CUDA) that holds managed memory
 * until told to go: its address is memory this process may not name. */
struct other {
    pid_t pid;
    int to, from;
    CUdeviceptr managed;
};

static void other_start(struct other *o)
{
    int down[2], up[2];
    REQUIRE(pipe(down) == 0 && pipe(up) == 0, "pipe");
    o->pid = fork();
    REQUIRE(o->pid >= 0, "fork");
    if (o->pid == 0) {
        close(down[1]);
        close(up[0]);
        CUdevice dev;
        CUcontext ctx;
        t_setup(&dev, &ctx);
        CUdeviceptr m;
        CHECK(cuMemAllocManaged(&m, 1 << 16, CU_MEM_ATTACH_GLOBAL));
        t_write_all(up[1], &m, sizeof(m));
        char c;
        (void)t_read_all(down[0], &c, 1);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    o->to = down[1];
    o->from = up[0];
    REQUIRE(t_read_all(o->from, &o->managed, sizeof(o->managed)), "the other process died");
}

static void other_stop(struct other *o)
{
    t_write_all(o->to, "x", 1);
    int st = 0;
    REQUIRE(waitpid(o->pid, &st, 0) == o->pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the other process failed");
    close(o->to);
    close(o->from);
}

/* ---------------------------------------------------------------- batches */

typedef CUresult (*prefetch_fn)(CUdeviceptr *, size_t *, size_t, CUmemLocation *, size_t *, size_t,
                                unsigned long long, CUstream);

/* --bad-batches: the batches with bad arguments run too. The real driver (580.159.04, H200)
 * does not refuse them safely: device memory and a wrapping size were each accepted in one
 * run and refused in another, and every native run that made these calls aborted soon after
 * in malloc with its heap overwritten (a batch that names more operations than its arrays
 * hold reads ranges past them, and a discard of such a range may hit the heap; the driver's
 * refusal is not all or nothing). So they are the shim's contract only (programs.txt:
 * shim), which checks every operation before any takes effect. */
static int bad_args;

/* Each bad batch fails as it should, and records nothing. */
static void bad_batches(CUdeviceptr m1, CUdeviceptr dev_mem, void *pinned, void *pageable,
                        CUdeviceptr foreign, CUstream s)
{
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CUmemLocation bad_loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 99};
    size_t zero = 0;
    struct {
        const char *what;
        CUdeviceptr p;
        size_t n;
    } ranges[] = {
        {"device memory", dev_mem, 4096},
        {"pinned host memory", (CUdeviceptr)(uintptr_t)pinned, 4096},
        {"another process's managed memory", foreign, 4096},
        {"a size past the allocation", m1 + (1 << 16) - 4, 8},
        {"a size that wraps", m1 + 4096, (size_t)-1},
        {"size 0", m1, 0},
        {"a huge size", m1, (size_t)1 << 40},
    };
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        /* A good range first, to the host (m1 went to the device): the batch is refused
         * whole, so that m1 still reads as last prefetched to the device. */
        CUdeviceptr p[2] = {m1, ranges[i].p};
        size_t n[2] = {4096, ranges[i].n};
        EXPECT(cuMemPrefetchBatchAsync(p, n, 2, &host, &zero, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
        EXPECT(cuMemDiscardBatchAsync(p, n, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
        EXPECT(cuMemDiscardAndPrefetchBatchAsync(p, n, 2, &host, &zero, 1, 0, s),
               CUDA_ERROR_INVALID_VALUE);
        printf("managed_vars: batch with %s refused\n", ranges[i].what);
    }
    /* Pageable memory is a batch's to name only where the device reads pageable memory
     * (the real driver's HMM; never through the shim, whose clients' pages no kernel sees). */
    int pageable_ok = 0;
    CHECK(cuDeviceGetAttribute(&pageable_ok, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0));
    CUdeviceptr pp[1] = {(CUdeviceptr)(uintptr_t)pageable};
    size_t pn[1] = {4096};
    EXPECT(cuMemPrefetchBatchAsync(pp, pn, 1, &host, &zero, 1, 0, s),
           pageable_ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
    printf("managed_vars: batch with pageable host memory as the device's pageable access says\n");
    CUdeviceptr p[2] = {m1, m1 + 8192};
    size_t n[2] = {4096, 4096};
    size_t idx2[2] = {0, 1}, idx_bad[2] = {1, 0}, idx_same[2] = {0, 0}, idx_past[2] = {0, 2};
    CUmemLocation two[2] = {here, here};
    EXPECT(cuMemPrefetchBatchAsync(p, n, 0, &here, &zero, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, (size_t)-1, &here, &zero, 1, 0, s),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemDiscardBatchAsync(p, n, (size_t)-1 / 8 + 1, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(NULL, n, 2, &here, &zero, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemDiscardBatchAsync(p, NULL, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, NULL, &zero, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, &here, &zero, 1, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemDiscardBatchAsync(p, n, 2, 1, s), CUDA_ERROR_INVALID_VALUE);
    printf("managed_vars: batch counts, arrays and flags refused\n");
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, &here, &zero, 0, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, two, idx_bad, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, two, idx_same, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, two, idx_past, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 1, two, idx2, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, &bad_loc, &zero, 1, 0, s), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuMemDiscardAndPrefetchBatchAsync(p, n, 2, &bad_loc, &zero, 1, 0, s),
           CUDA_ERROR_INVALID_DEVICE);
    printf("managed_vars: batch locations and their indices refused\n");
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, &here, &zero, 1, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchBatchAsync(p, n, 2, &here, &zero, 1, 0, CU_STREAM_LEGACY),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemDiscardBatchAsync(p, n, 2, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    printf("managed_vars: batches on the legacy stream refused\n");
}

static void batches(const struct vars *a, CUstream s, struct other *o)
{
    CUdeviceptr m1, m2, dev_mem;
    void *pinned, *pageable = malloc(1 << 16);
    REQUIRE(pageable, "malloc");
    CHECK(cuMemAllocManaged(&m1, 1 << 16, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&m2, 1 << 16, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAlloc(&dev_mem, 1 << 16));
    CHECK(cuMemAllocHost(&pinned, 1 << 16));
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};

    /* Two allocations to the device, a variable to the host: two locations. */
    CUdeviceptr p[3] = {m1, m2 + 4096, a->d_arr};
    size_t n[3] = {1 << 16, 8192, MV_LEN * 4};
    CUmemLocation locs[2] = {here, host};
    size_t idx[2] = {0, 2};
    CHECK(cuMemPrefetchBatchAsync(p, n, 3, locs, idx, 2, 0, s));
    printf("managed_vars: batch prefetch: last prefetch %d, %d, variable %d, untouched part %d\n",
           last_prefetch(m1, 1 << 16), last_prefetch(m2 + 4096, 8192),
           last_prefetch(a->d_arr, MV_LEN * 4), last_prefetch(m2, 4096));
    if (bad_args) bad_batches(m1, dev_mem, pinned, pageable, o->managed, s);
    printf("managed_vars: before the discards: last prefetch %d, %d\n", last_prefetch(m1, 4096),
           last_prefetch(m1 + 8192, 4096));

    /* Discard: the contents may be anything after it; written again, they are these. (No
     * variable: the driver may discard whole pages, and its neighbours share its page.) */
    CUdeviceptr d1[2] = {m1, m2 + 8192};
    size_t dn[2] = {1 << 16, 4096};
    CHECK(cuMemDiscardBatchAsync(d1, dn, 2, 0, s));
    CHECK(cuStreamSynchronize(s));
    memset((void *)(uintptr_t)m1, 0x5a, 1 << 16);
    CHECK(cuMemsetD8Async(m1 + 100, 0x11, 10, s));
    CHECK(cuStreamSynchronize(s));
    const unsigned char *h1 = (const unsigned char *)(uintptr_t)m1;
    REQUIRE(h1[99] == 0x5a && h1[100] == 0x11 && h1[109] == 0x11 && h1[110] == 0x5a,
            "after discard and rewrite: %x %x %x %x", h1[99], h1[100], h1[109], h1[110]);
    CUdeviceptr d2[2] = {m2, m1};
    size_t dn2[2] = {1 << 16, 4096};
    CHECK(cuMemDiscardAndPrefetchBatchAsync(d2, dn2, 2, &host, idx, 1, 0, s));
    printf("managed_vars: discard and prefetch: last prefetch %d, %d, rest %d\n",
           last_prefetch(m2, 1 << 16), last_prefetch(m1, 4096), last_prefetch(m1 + 4096, 4096));

    /* The per-thread default stream's entry point takes the NULL stream. */
    prefetch_fn ptsz = NULL;
    CUdriverProcAddressQueryResult q;
    CHECK(cuGetProcAddress("cuMemPrefetchBatchAsync", (void **)&ptsz, 13000,
                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
    REQUIRE(ptsz && q == CU_GET_PROC_ADDRESS_SUCCESS, "no per-thread entry point");
    CHECK(ptsz(p, n, 1, &here, idx, 1, 0, NULL));
    EXPECT(ptsz(p, n, 1, &here, idx, 1, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    t_ok("batch prefetch, discard, and both; their errors");

    CHECK(cuMemFree(m1));
    CHECK(cuMemFree(m2));
    CHECK(cuMemFree(dev_mem));
    CHECK(cuMemFreeHost(pinned));
    free(pageable);
}

/* ---------------------------------------------------------------- threads */

static CUcontext threads_ctx;

/* One thread: a module of its own, 150 rounds of host and device turns on its variables,
 * synchronised by its stream, an event or a successful query in turn; then it unloads. */
static void *turns(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(threads_ctx));
    CUmodule mod;
    struct vars v;
    load_module(&v, &mod);
    CUstream s;
    CUevent ev;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    for (unsigned r = 0; r < 150; r++) {
        *v.count += 1;
        v.arr[id] += 2;
        add(&v, 1, s);
        CUresult q;
        switch (r % 3) {
        case 0:
            CHECK(cuStreamSynchronize(s));
            break;
        case 1:
            CHECK(cuEventRecord(ev, s));
            CHECK(cuEventSynchronize(ev));
            break;
        default:
            while ((q = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY)
                usleep(50);
            CHECK(q);
        }
        REQUIRE(*v.count == 2 * (int)(r + 1), "thread %u round %u: mv_count %d", id, r, *v.count);
        REQUIRE(v.arr[id] == (r + 1) * (3 + id), "thread %u round %u: mv_arr %u", id, r, v.arr[id]);
    }
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    return NULL;
}

static void threads(void)
{
    pthread_t t[4];
    for (unsigned i = 0; i < 4; i++)
        REQUIRE(pthread_create(&t[i], NULL, turns, (void *)(uintptr_t)i) == 0, "pthread_create");
    for (unsigned i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    t_ok("4 threads, a module each, 150 rounds of turns each, while the others unload");
}

/* ---------------------------------------------------------------- variables */

static void hold(void)
{
    CUmodule mod;
    CUlibrary lib;
    struct vars a, l;
    load_module(&a, &mod);
    void *image = t_read_kernel_file("managed.fatbin", NULL);
    CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    free(image);
    bind(&l, library_managed, lib);
    *a.count = 3;
    *l.count = 4;
    add(&a, 1, NULL);
    CHECK(cuCtxSynchronize());
    REQUIRE(*a.count == 4 && *l.count == 4, "held variables: %d %d", *a.count, *l.count);
    *a.count = 5; /* written, not pushed yet */
    printf("ready\n");
    fflush(stdout);
    for (unsigned left = 600; left;)
        left = sleep(left);
}

int main(int argc, char **argv)
{
    t_init("managed_vars", 120);
    struct other o = {0};
    int holding = t_has_flag(argc, argv, "--hold");
    bad_args = t_has_flag(argc, argv, "--bad-batches");
    if (!holding) other_start(&o);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    if (holding) hold();
    if (t_has_flag(argc, argv, "--threads")) {
        threads_ctx = ctx;
        threads();
        other_stop(&o);
        t_pass();
    }

    CUmodule ma, mb;
    struct vars a, b;
    load_module(&a, &ma);
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, OUT_LEN * 4));

    /* Looked up: the image's values, managed memory the host reads at the same address. */
    printf("managed_vars: looked up: mv_init %d, mv_count %d, mv_arr[255] %u\n", *a.init, *a.count,
           a.arr[MV_LEN - 1]);
    unsigned managed = 9, plain = 9, type = 0;
    void *hp = NULL;
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a.d_arr + 8));
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a.d_arr + 8));
    CHECK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, a.d_arr + 8));
    CHECK(cuPointerGetAttribute(&plain, CU_POINTER_ATTRIBUTE_IS_MANAGED, a.d_plain));
    printf("managed_vars: pointer attributes: managed %u, memory type %s, host pointer %s; "
           "mv_plain managed %u\n",
           managed, type == CU_MEMORYTYPE_DEVICE ? "device" : "other",
           hp == (void *)(uintptr_t)(a.d_arr + 8) ? "the same" : "another", plain);
    t_ok("variables looked up with their initial values, managed");

    /* The host writes, a kernel reads. */
    for (unsigned i = 0; i < MV_LEN; i++)
        a.arr[i] = 3 * i;
    *a.count = 5;
    read_into(&a, out, NULL);
    expect_out(out, 5, 3, "host wrote, kernel read");
    t_ok("the host writes, a kernel reads");

    /* A kernel writes, the host reads after a synchronisation. */
    add(&a, 7, NULL);
    CHECK(cuCtxSynchronize());
    expect_vars(&a, 12, 7, 4, "after cuCtxSynchronize");
    t_ok("a kernel writes, the host reads after cuCtxSynchronize");

    /* One kernel writes, the next reads, with no synchronisation between (nor a host
     * write): the second launch must not put back what the host saw before the first. */
    *a.count = 100;
    add(&a, 1, NULL);
    read_into(&a, out, NULL);
    expect_out(out, 101 + 8, 5, "kernel wrote, kernel read");
    CUstream s, s2;
    CUevent ev;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    add(&a, 2, s);
    CHECK(cuEventRecord(ev, s));
    CHECK(cuStreamWaitEvent(s2, ev, 0));
    read_into(&a, out, s2);
    CHECK(cuStreamSynchronize(s2));
    expect_out(out, 103 + 10, 6, "kernel wrote, kernel read on another stream");
    expect_vars(&a, 103, 10, 6, "after both streams");
    t_ok("one kernel writes, the next reads without a synchronisation, one stream or two");

    /* Every kind of synchronisation brings the device's writes. */
    add(&a, 10, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(*a.count == 113, "after cuStreamSynchronize: %d", *a.count);
    add(&a, 10, s);
    CHECK(cuEventRecord(ev, s));
    CHECK(cuEventSynchronize(ev));
    REQUIRE(*a.count == 123, "after cuEventSynchronize: %d", *a.count);
    add(&a, 10, s);
    CUresult qr;
    while ((qr = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY)
        usleep(100);
    CHECK(qr);
    REQUIRE(*a.count == 133, "after cuStreamQuery: %d", *a.count);
    add(&a, 10, s);
    CHECK(cuEventRecord(ev, s));
    while ((qr = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY)
        usleep(100);
    CHECK(qr);
    REQUIRE(*a.count == 143, "after cuEventQuery: %d", *a.count);
    /* A synchronous copy of other memory, after the kernel on the legacy stream. */
    add(&a, 10, NULL);
    unsigned first;
    CHECK(cuMemcpyDtoH(&first, out, sizeof(first)));
    expect_vars(&a, 153, 60, 11, "after the five synchronisations");
    t_ok("stream, event, context synchronisation, successful queries and a synchronous copy "
         "bring the writes");

    /* Copies and memsets name the variables as device memory. */
    *a.count = 77;
    int x = 0, y = 88;
    CHECK(cuMemcpyDtoH(&x, a.d_count, 4));
    REQUIRE(x == 77, "copied out after a host write: %d", x);
    CHECK(cuMemcpyHtoD(a.d_count, &y, 4));
    REQUIRE(*a.count == 88, "after a copy in: %d", *a.count);
    CHECK(cuMemsetD32(a.d_arr, 9, MV_LEN));
    REQUIRE(a.arr[0] == 9 && a.arr[MV_LEN - 1] == 9, "after a memset: %u %u", a.arr[0],
            a.arr[MV_LEN - 1]);
    y = 66;
    CHECK(cuMemcpyHtoDAsync(a.d_count, &y, 4, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(*a.count == 66, "after an async copy in: %d", *a.count);
    a.arr[3] = 1000;
    CHECK(cuMemcpyDtoD(out, a.d_arr, MV_LEN * 4));
    unsigned h[MV_LEN];
    CHECK(cuMemcpyDtoH(h, out, sizeof(h)));
    REQUIRE(h[2] == 9 && h[3] == 1000, "device copy of the variable: %u %u", h[2], h[3]);
    t_ok("copies and memsets to and from the variables");

    /* Another module of the same image: variables of its own. */
    load_module(&b, &mb);
    REQUIRE(b.d_count != a.d_count && b.d_arr != a.d_arr, "the modules share variables");
    printf("managed_vars: second module: mv_init %d, mv_count %d, mv_arr[7] %u\n", *b.init,
           *b.count, b.arr[7]);
    add(&b, 4, NULL);
    CHECK(cuCtxSynchronize());
    expect_vars(&b, 4, 4, 1, "second module");
    REQUIRE(*a.count == 66 && a.arr[3] == 1000, "the first module's changed: %d %u", *a.count,
            a.arr[3]);
    *a.count = 1;
    *b.count = 2;
    CUdeviceptr out_b;
    CHECK(cuMemAlloc(&out_b, OUT_LEN * 4));
    read_into(&a, out, s);
    read_into(&b, out_b, s2);
    CHECK(cuCtxSynchronize());
    unsigned ha[OUT_LEN], hb[OUT_LEN];
    CHECK(cuMemcpyDtoH(ha, out, sizeof(ha)));
    CHECK(cuMemcpyDtoH(hb, out_b, sizeof(hb)));
    REQUIRE(ha[0] == 10 && ha[3] == 1001 && hb[0] == 6 && hb[5] == 11,
            "two modules read: %u %u %u %u", ha[0], ha[3], hb[0], hb[5]);
    t_ok("two modules, each with variables of its own");

    /* A library's variables. */
    CUlibrary lib;
    void *image = t_read_kernel_file("managed.fatbin", NULL);
    CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    free(image);
    struct vars l;
    bind(&l, library_managed, lib);
    CUdeviceptr g = 0;
    size_t gb = 0;
    CHECK(cuLibraryGetGlobal(&g, &gb, lib, "mv_count"));
    REQUIRE(g == l.d_count && gb == 4, "cuLibraryGetGlobal gives another address");
    CHECK(cuLibraryGetManaged(&g, NULL, lib, "mv_arr"));
    REQUIRE(g == l.d_arr, "without a size: another address");
    EXPECT(cuLibraryGetManaged(&g, &gb, lib, "no_such_variable"), CUDA_ERROR_NOT_FOUND);
    CUkernel kadd;
    CHECK(cuLibraryGetKernel(&kadd, lib, "mv_add"));
    l.add = (CUfunction)kadd;
    printf("managed_vars: library: mv_init %d, mv_count %d\n", *l.init, *l.count);
    add(&l, 6, NULL);
    CHECK(cuCtxSynchronize());
    expect_vars(&l, 6, 6, 1, "library");
    *l.count = 50;
    add(&l, 1, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(*l.count == 51 && *a.count == 1 && *b.count == 2, "library after a host write: %d",
            *l.count);
    t_ok("a library's variables by cuLibraryGetManaged");

    /* Prefetches, advice and stream attachment take a variable. */
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CHECK(cuMemPrefetchAsync(a.d_arr, MV_LEN * 4, here, 0, s));
    CHECK(cuMemAdvise(a.d_arr, MV_LEN * 4, CU_MEM_ADVISE_SET_READ_MOSTLY, here));
    int rm = 0;
    CHECK(cuMemRangeGetAttribute(&rm, sizeof(rm), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, a.d_arr,
                                 MV_LEN * 4));
    printf("managed_vars: variable prefetched to %d, read mostly %d\n",
           last_prefetch(a.d_arr, MV_LEN * 4), rm);
    CHECK(cuStreamAttachMemAsync(s, a.d_count, 0, CU_MEM_ATTACH_SINGLE));
    add(&a, 1, s);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamAttachMemAsync(s, a.d_count, 0, CU_MEM_ATTACH_GLOBAL));
    REQUIRE(*a.count == 2, "attached: %d", *a.count);
    t_ok("prefetch, advice and stream attachment of a variable");

    /* Many rounds of host and device updates (an OpenACC-style loop). */
    for (int r = 0; r < 40; r++) {
        for (unsigned i = 0; i < MV_LEN; i++)
            b.arr[i] += 2;
        *b.count += 1;
        add(&b, 1, r % 2 ? s : NULL);
        CHECK(r % 2 ? cuStreamSynchronize(s) : cuCtxSynchronize());
        REQUIRE(*b.count == 2 + 2 * (r + 1), "round %d: mv_count %d", r, *b.count);
        REQUIRE(b.arr[10] == 14 + 3 * (unsigned)(r + 1) + 10u * (unsigned)(r + 1),
                "round %d: mv_arr[10] %u", r, b.arr[10]);
    }
    t_ok("40 rounds of host and device updates, all coherent");

    batches(&a, s, &o);

    CHECK(cuModuleUnload(mb));
    EXPECT(cuModuleGetGlobal(&g, &gb, mb, "mv_count"), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuLibraryUnload(lib));
    add(&a, 1, NULL);
    CHECK(cuCtxSynchronize());
    REQUIRE(*a.count == 3, "after the other module went: %d", *a.count);
    t_ok("unloaded; the rest still works");
    CHECK(cuMemFree(out));
    CHECK(cuMemFree(out_b));
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuModuleUnload(ma));
    other_stop(&o);
    t_pass();
}
