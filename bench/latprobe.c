/* latprobe: where a round trip's microseconds go, measured natively in one process that
 * stands in for a client and for mpsshim's server (issue 29: launch + synchronise within
 * 1 us of native, small pinned copies within 5% of native; bench/README.md, "latprobe").
 *
 * Every way below is timed over ROUNDS round trips, in BATCHES batches taken in turn with
 * the other ways' (so that a change of the GPU's clocks falls on all of them); it prints
 * each way's median round trip as `metric lat_<way> US us`, and the batches' spread.
 *
 * A launch of an empty kernel on a created non-blocking stream with a priority (the server's
 * streams, server/core/streams.c), then waiting for it:
 *   sync          cuStreamSynchronize (a program's own way: callbench's launch_sync_us)
 *   query_sync    a cuStreamQuery first (what the server asks before every reply from the GPU)
 *   store         cuStreamWriteValue32 of the round's number into registered host memory,
 *                 the thread spinning on it (a reply from the GPU, server/core/waits.c)
 *   relay_sync    two threads: the "client" writes a request word and spins on a reply word;
 *                 the "worker", spinning on the request word, launches, synchronises and
 *                 writes the reply (the worker's reply)
 *   relay_store   the worker launches and has the GPU store the reply (cuStreamWriteValue32)
 *   relay_server  the worker as the server does it: launch, cuStreamQuery, store, and a
 *                 cuEventRecord behind the store
 *   relay_poll    the same, the worker querying that event at every turn while it spins
 *                 for the next request, as the server's worker polls its waits (a server
 *                 that polled less often was slower: bench/results/issue29-2026-11-28)
 * Copies of 4 KiB, 64 KiB and 1 MiB each way between device memory and host memory:
 *   copy_sync     cuMemcpyHtoD / DtoH from cuMemHostAlloc'd memory (copysweep's pinned)
 *   copy_reg      the same from shared memory (a memfd mapping) that cuMemHostRegister made
 *                 the device's: what the server copies a client's pinned memory from
 *   copy_async    cuMemcpyAsync on the stream, then cuStreamSynchronize (registered memory)
 *   copy_store    cuMemcpyAsync, then the GPU stores the round's number; the thread spins
 *   copy_relay    the worker does the server's: cuMemcpyAsync, query, store, event record
 *
 * Run it with and without CUDA_DEVICE_MAX_CONNECTIONS=32 (the server's setting) to see what
 * the hardware queues cost. Not a test: it passes or fails nothing.
 *
 * --mib M makes the host buffers M MiB (the copies stay at the start of them): a program's
 * pinned buffer is often far larger than one copy, and through mpsshim it is a registered
 * memfd mapping as large as the allocation. --thp asks transparent huge pages for the memfd
 * mapping (madvise; the kernel's shmem_enabled setting decides).
 *
 * usage: latprobe [--rounds N] [--batches B] [--mib M] [--thp]   (2000, 5, 1) */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr, "usage: latprobe [--rounds N] [--batches B] [--mib M] [--thp]\n");
    exit(2);
}

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* What the two threads share, each word on its own cache line as the channel's are. */
struct shared {
    _Alignas(64) _Atomic uint32_t req; /* the client's request number */
    _Alignas(64) _Atomic uint32_t rep; /* the worker's (CPU) reply number */
    _Alignas(64) _Atomic int way;      /* what the worker does for a request; -1: leave */
};

enum way {
    W_SYNC,
    W_QUERY_SYNC,
    W_STORE,
    W_RELAY_SYNC,
    W_RELAY_STORE,
    W_RELAY_SERVER,
    W_RELAY_POLL,
    W_COPY_SYNC,
    W_COPY_REG,
    W_COPY_ASYNC,
    W_COPY_STORE,
    W_COPY_RELAY,
    NWAYS
};
static const char *const way_name[NWAYS] = {
    "sync",       "query_sync", "store",    "relay_sync", "relay_store", "relay_server",
    "relay_poll", "copy_sync",  "copy_reg", "copy_async", "copy_store",  "copy_relay"};

struct probe {
    CUcontext ctx;
    CUstream st;
    CUfunction empty;
    CUevent ev;
    volatile uint32_t *gpu_word; /* registered host memory the GPU stores into */
    CUdeviceptr gpu_word_d;
    uint32_t seq;    /* the last number asked of the GPU */
    void *pinned;    /* cuMemHostAlloc'd, 1 MiB */
    void *reg;       /* memfd-backed, registered, 1 MiB */
    CUdeviceptr dev; /* 1 MiB */
    size_t bytes;    /* this copy way's size */
    int htod;        /* and direction */
    struct shared *sh;
};

static void launch(struct probe *p)
{
    CK(cuLaunchKernel(p->empty, 1, 1, 1, 32, 1, 1, 0, p->st, NULL, NULL));
}

static void copy_async(struct probe *p, void *host)
{
    if (p->htod)
        CK(cuMemcpyAsync(p->dev, (CUdeviceptr)(uintptr_t)host, p->bytes, p->st));
    else
        CK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)host, p->dev, p->bytes, p->st));
}

/* The GPU stores the next number behind the stream's work; returns it. */
static uint32_t store(struct probe *p)
{
    uint32_t n = ++p->seq;
    CK(cuStreamWriteValue32(p->st, p->gpu_word_d, n, 0));
    return n;
}

static void spin_gpu(struct probe *p, uint32_t n)
{
    while (*p->gpu_word != n)
        relax();
}

/* The worker's part of one relayed round. */
static void serve(struct probe *p, int way)
{
    CUresult q;
    switch (way) {
    case W_RELAY_SYNC:
        launch(p);
        CK(cuStreamSynchronize(p->st));
        break;
    case W_RELAY_STORE:
        launch(p);
        store(p);
        break;
    case W_RELAY_SERVER:
    case W_RELAY_POLL:
    case W_COPY_RELAY:
        if (way != W_COPY_RELAY)
            launch(p);
        else
            copy_async(p, p->reg);
        q = cuStreamQuery(p->st);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) CK(q);
        store(p);
        CK(cuEventRecord(p->ev, p->st));
        break;
    }
}

static void *worker(void *arg)
{
    struct probe *p = arg;
    struct shared *sh = p->sh;
    CK(cuCtxSetCurrent(p->ctx));
    uint32_t seen = 0;
    for (;;) {
        uint32_t r;
        while ((r = atomic_load_explicit(&sh->req, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&sh->way, memory_order_relaxed) == W_RELAY_POLL)
                (void)cuEventQuery(p->ev);
            relax();
        }
        seen = r;
        int way = atomic_load_explicit(&sh->way, memory_order_relaxed);
        if (way < 0) return NULL;
        serve(p, way);
        /* The worker's reply: always (the GPU's store is the reply for the ways that have
         * one, the client waits for that; this one only says the worker is free again). */
        atomic_store_explicit(&sh->rep, r, memory_order_release);
    }
}

/* One round of `way`, as the client sees it: from its call to the end of its wait. */
static void round_trip(struct probe *p, int way)
{
    struct shared *sh = p->sh;
    uint32_t n;
    CUresult q;
    switch (way) {
    case W_SYNC:
        launch(p);
        CK(cuStreamSynchronize(p->st));
        return;
    case W_QUERY_SYNC:
        launch(p);
        q = cuStreamQuery(p->st);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) CK(q);
        CK(cuStreamSynchronize(p->st));
        return;
    case W_STORE:
        launch(p);
        spin_gpu(p, store(p));
        return;
    case W_COPY_SYNC:
    case W_COPY_REG: {
        void *h = way == W_COPY_SYNC ? p->pinned : p->reg;
        if (p->htod)
            CK(cuMemcpyHtoD(p->dev, h, p->bytes));
        else
            CK(cuMemcpyDtoH(h, p->dev, p->bytes));
        return;
    }
    case W_COPY_ASYNC:
        copy_async(p, p->reg);
        CK(cuStreamSynchronize(p->st));
        return;
    case W_COPY_STORE:
        copy_async(p, p->reg);
        spin_gpu(p, store(p));
        return;
    default: /* relayed */
        n = atomic_load_explicit(&sh->req, memory_order_relaxed) + 1;
        atomic_store_explicit(&sh->way, way, memory_order_relaxed);
        atomic_store_explicit(&sh->req, n, memory_order_release);
        if (way == W_RELAY_SYNC) {
            while (atomic_load_explicit(&sh->rep, memory_order_acquire) != n)
                relax();
        } else {
            /* The GPU's number is the worker's next one: wait for the worker to have asked
             * for it (its reply), then for the GPU. Only the GPU's part is on the client's
             * path when the worker is quicker than the GPU, as it is. */
            while (atomic_load_explicit(&sh->rep, memory_order_acquire) != n)
                relax();
            spin_gpu(p, p->seq);
        }
        return;
    }
}

static double median_us(uint64_t *ns, size_t n)
{
    return bench_median_ns(ns, n) / 1e3;
}

/* The median round trip of one batch, us. */
static double batch(struct probe *p, int way, unsigned rounds, uint64_t *t)
{
    for (unsigned i = 0; i < rounds / 20; i++) /* warm */
        round_trip(p, way);
    for (unsigned i = 0; i < rounds; i++) {
        uint64_t t0 = bench_now_ns();
        round_trip(p, way);
        t[i] = bench_now_ns() - t0;
    }
    CK(cuStreamSynchronize(p->st));
    return median_us(t, rounds);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, double *m, unsigned batches)
{
    qsort(m, batches, sizeof *m, cmp_d);
    printf("metric lat_%s %.3f us\n", name, m[batches / 2]);
    printf("# lat_%s batches %.3f .. %.3f us\n", name, m[0], m[batches - 1]);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bench_prog = "latprobe";
    unsigned rounds = 2000, batches = 5;
    size_t mib = 1u << 20;
    int thp = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0)
            rounds = (unsigned)bench_num_arg(argc, argv, i++, 20, 1000000, usage);
        else if (strcmp(argv[i], "--batches") == 0)
            batches = (unsigned)bench_num_arg(argc, argv, i++, 1, 99, usage);
        else if (strcmp(argv[i], "--mib") == 0)
            mib = (size_t)bench_num_arg(argc, argv, i++, 1, 4096, usage) << 20;
        else if (strcmp(argv[i], "--thp") == 0)
            thp = 1;
        else
            usage();
    }
    struct probe p;
    memset(&p, 0, sizeof p);
    CUdevice dev;
    bench_step = "setup";
    p.ctx = bench_use_device(0, &dev);
    const char *conns = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("# latprobe: pid %d, CUDA_DEVICE_MAX_CONNECTIONS=%s, %u rounds x %u batches, host "
           "buffers of %zu MiB%s\n",
           (int)getpid(), conns ? conns : "(unset)", rounds, batches, mib >> 20,
           thp ? ", huge pages asked for the memfd" : "");
    CUmodule mod;
    p.empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx",
                                  "empty_kernel", &mod);
    int lo, hi;
    CK(cuCtxGetStreamPriorityRange(&lo, &hi));
    CK(cuStreamCreateWithPriority(&p.st, CU_STREAM_NON_BLOCKING, lo));
    CK(cuEventCreate(&p.ev, CU_EVENT_DISABLE_TIMING));

    long page = sysconf(_SC_PAGESIZE);
    int fd = memfd_create("latprobe", 0);
    if (fd < 0 || ftruncate(fd, (off_t)(mib + (size_t)page)) != 0)
        bench_die("no shared memory (%s)", "memfd");
    uint8_t *shm = mmap(NULL, mib + (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) bench_die("no shared memory (%s)", "mmap");
    if (thp && madvise(shm, mib, MADV_HUGEPAGE) != 0) printf("# madvise(MADV_HUGEPAGE) refused\n");
    memset(shm, 0, mib + (size_t)page);
    CK(cuMemHostRegister(shm, mib + (size_t)page,
                         CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    p.reg = shm;
    p.gpu_word = (volatile uint32_t *)(shm + mib);
    CK(cuMemHostGetDevicePointer(&p.gpu_word_d, (void *)(uintptr_t)p.gpu_word, 0));
    CK(cuMemHostAlloc(&p.pinned, mib, CU_MEMHOSTALLOC_PORTABLE));
    memset(p.pinned, 1, mib);
    CK(cuMemAlloc(&p.dev, mib));
    p.sh = aligned_alloc(64, sizeof *p.sh);
    if (!p.sh) bench_die("out of host memory (%s)", "shared words");
    memset(p.sh, 0, sizeof *p.sh);
    pthread_t w;
    if (pthread_create(&w, NULL, worker, &p) != 0) bench_die("no thread (%s)", "worker");
    launch(&p); /* lazy loading outside the timing */
    CK(cuStreamSynchronize(p.st));

    uint64_t *t = malloc(rounds * sizeof *t);
    double *m = malloc((size_t)NWAYS * 6 * batches * sizeof *m);
    if (!t || !m) bench_die("out of host memory (%s)", "samples");
    static const size_t sizes[3] = {4096, 65536, 1u << 20};
    /* Launch ways: NWAYS-5 of them; copy ways: 5 ways x 3 sizes x 2 directions. */
    for (unsigned b = 0; b < batches; b++) {
        for (int w8 = 0; w8 < W_COPY_SYNC; w8++) {
            bench_step = way_name[w8];
            m[w8 * batches + b] = batch(&p, w8, rounds, t);
        }
        for (int s = 0; s < 3; s++)
            for (int d = 0; d < 2; d++)
                for (int w8 = W_COPY_SYNC; w8 < NWAYS; w8++) {
                    p.bytes = sizes[s];
                    p.htod = d == 0;
                    bench_step = way_name[w8];
                    size_t k = (size_t)(W_COPY_SYNC + ((size_t)(w8 - W_COPY_SYNC) * 6 +
                                                       (size_t)s * 2 + (size_t)d));
                    m[k * batches + b] = batch(&p, w8, rounds, t);
                }
    }
    for (int w8 = 0; w8 < W_COPY_SYNC; w8++)
        report(way_name[w8], m + (size_t)w8 * batches, batches);
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            for (int w8 = W_COPY_SYNC; w8 < NWAYS; w8++) {
                char name[64];
                snprintf(name, sizeof name, "%s_%s_%zu", way_name[w8], d == 0 ? "htod" : "dtoh",
                         sizes[s]);
                size_t k = (size_t)(W_COPY_SYNC +
                                    ((size_t)(w8 - W_COPY_SYNC) * 6 + (size_t)s * 2 + (size_t)d));
                report(name, m + k * batches, batches);
            }

    bench_step = "teardown";
    atomic_store(&p.sh->way, -1);
    atomic_fetch_add(&p.sh->req, 1);
    pthread_join(w, NULL);
    CK(cuMemHostUnregister(shm));
    CK(cuMemFreeHost(p.pinned));
    CK(cuMemFree(p.dev));
    CK(cuEventDestroy(p.ev));
    CK(cuStreamDestroy(p.st));
    CK(cuModuleUnload(mod));
    free(t);
    free(m);
    return 0;
}
