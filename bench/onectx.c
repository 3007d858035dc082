/* onectx: the ceiling of one shared context. T threads of ONE process, each with a stream of
 * its own in the device's primary context, run fleetc's step (W us of host work, K launches
 * of an empty kernel, a 4-byte read back and a synchronize) for a fixed time from a common
 * start; it prints the steps per second of all of them together. Run natively, it is what
 * mpsshim's server (one context, one worker thread per client) could at best give T clients
 * of bench/fleetc: what the driver lets T threads of one context launch, whatever the shim
 * costs on top. Native MPS gives each client its own context and is not bound by it.
 *
 * --green gives each thread a green context of its own over all the device's SMs (its stream
 * made there; the kernel, memory and the rest stay in the primary context, as the server's
 * SM shares do, server/limits/green.c): whether launches through separate green contexts escape
 * the one context's ceiling. --overlap-ms M then has every thread, together, launch one
 * 2-block kernel spinning M ms (bench/spin.ptx) on its stream and wait for it: the time all
 * took says whether the threads' streams (in green contexts or not) run side by side
 * (about M) or one after another (about THREADS x M).
 *
 * --graph makes each step's K launches one graph, captured from the thread's stream once and
 * launched with cuGraphLaunch: whether a process that launched a client's repeated sequence
 * of kernels as a graph (one driver call in place of K) gets past the one process's
 * launch ceiling.
 *
 * --param launches fill_u32 (a pointer, a value, a count: one thread writes the step's number
 * into 4 bytes of the thread's own) instead of the empty kernel, so that each step's launches
 * carry values that change; with --graph, --update U gives U of a step's K nodes their new
 * values (cuGraphExecKernelNodeSetParams) before each cuGraphLaunch: whether a graph whose
 * nodes must be updated at every replay (server/code/seqgraph.c refuses a replay when more
 * than half its nodes differ, on the assumption that an update costs what a launch does)
 * still gets past the ceiling.
 *
 * --launchers L hands each thread's launches and read-back to one of L launcher threads
 * (thread i to launcher i % L, through a word; the thread sleeps until they are issued, then
 * synchronises itself): whether few threads, each launching for many as a server worker
 * replaying several clients' rings would, launch more than every thread for itself.
 *
 * --library kernel|function loads the empty kernel with cuLibraryLoadData, as cudart 12+
 * loads a program's kernels, and launches its CUkernel handle (what mpsshim's server passes
 * to cuLaunchKernel for such clients) or the CUfunction cuKernelGetFunction gives for the
 * context: whether the driver's resolution of a CUkernel at each launch costs the one
 * process's launch path.
 *
 * usage: onectx THREADS [--work-us W] [--launches K] [--seconds S]
 *               [--sched auto|spin|yield|blocking] [--green] [--overlap-ms M] [--launchers L]
 *               [--graph [--update U]] [--param] [--library kernel|function]
 * Defaults: 100 us, 8 launches, 1 s, the driver's own scheduling (auto), the primary
 * context's streams, no overlap check. Not part of bench/run.sh: a diagnosis
 * (bench/README.md, "One context's ceiling"). */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static CUcontext ctx;
static CUdevice dev;
static CUfunction empty, fill, spin;
static unsigned long long work_us = 100, launches = 8, overlap_ms;
static uint64_t window_ns = 1000000000ull;
static int green, graph, param;
static unsigned long long nupdate; /* --update: nodes given new values before each replay */
static const char *library; /* --library: "kernel" or "function"; NULL: a module's function */
static unsigned long long nlaunchers;
static _Atomic int stop_launchers;
static pthread_barrier_t start, again;
static uint64_t overlap_t0; /* set by thread 0 after the second barrier */

struct thread {
    int index;
    uint64_t steps;
    uint64_t overlap_end; /* when its spinning kernel was seen done */
    /* --launchers: its stream and read-back, and the hand-over word (0 idle, 1 a step's
     * launches wanted, 2 issued) */
    CUstream s;
    CUdeviceptr d;
    uint32_t v;
    CUgraphExec exec; /* --graph: the step's launches */
    CUgraph g;        /* its graph and nodes, which --update names */
    CUgraphNode *node;
    unsigned value; /* --param: the value the step's launches write */
    _Atomic int job;
};
static struct thread *ts;
static unsigned long long nthreads;

/* Launch k of a step on t's stream: the empty kernel, or (--param) fill_u32 writing the
 * step's value into the thread's 4 bytes. */
static void launch_one(struct thread *t)
{
    if (!param) {
        CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, t->s, NULL, NULL));
        return;
    }
    unsigned long long n = 1;
    void *args[] = {&t->d, &t->value, &n};
    CK(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, t->s, args, NULL));
}

/* --update: the first U nodes of t's graph given the step's value. */
static void update_nodes(struct thread *t)
{
    unsigned long long n = 1;
    void *args[] = {&t->d, &t->value, &n};
    CUDA_KERNEL_NODE_PARAMS k = {.func = fill,
                                 .gridDimX = 1,
                                 .gridDimY = 1,
                                 .gridDimZ = 1,
                                 .blockDimX = 32,
                                 .blockDimY = 1,
                                 .blockDimZ = 1,
                                 .kernelParams = args};
    for (unsigned long long i = 0; i < nupdate; i++)
        CK(cuGraphExecKernelNodeSetParams(t->exec, t->node[i], &k));
}

/* A step's launches and its 4-byte read-back on t's stream. */
static void issue(struct thread *t)
{
    t->value++;
    if (t->exec) {
        update_nodes(t);
        CK(cuGraphLaunch(t->exec, t->s));
    } else {
        for (unsigned long long k = 0; k < launches; k++)
            launch_one(t);
    }
    CK(cuMemcpyDtoHAsync(&t->v, t->d, sizeof(t->v), t->s));
}

/* --launchers: issues the steps of threads id, id + L, ...; spins while it waits for them. */
static void *launcher(void *arg)
{
    unsigned long long id = (unsigned long long)(uintptr_t)arg;
    CK(cuCtxSetCurrent(ctx));
    while (!atomic_load_explicit(&stop_launchers, memory_order_relaxed)) {
        int any = 0;
        for (unsigned long long i = id; i < nthreads; i += nlaunchers) {
            struct thread *t = &ts[i];
            if (atomic_load_explicit(&t->job, memory_order_acquire) != 1) continue;
            issue(t);
            atomic_store_explicit(&t->job, 2, memory_order_release);
            syscall(SYS_futex, &t->job, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
            any = 1;
        }
        if (!any) __builtin_ia32_pause();
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: onectx THREADS [--work-us W] [--launches K] [--seconds S] "
                    "[--sched auto|spin|yield|blocking] [--green] [--overlap-ms M] "
                    "[--launchers L] [--graph [--update U]] [--param] "
                    "[--library kernel|function]\n");
    exit(2);
}

/* A stream in a green context of its own over all the SMs (*g: to destroy). */
static CUstream green_stream(CUgreenCtx *g)
{
    CUdevResource all;
    CUdevResourceDesc desc;
    CUstream s;
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    CK(cuDevResourceGenerateDesc(&desc, &all, 1));
    CK(cuGreenCtxCreate(g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CK(cuGreenCtxStreamCreate(&s, *g, CU_STREAM_NON_BLOCKING, 0));
    return s;
}

/* One thread: its stream and 4 bytes, one warm step, then steps until the window ends. */
static void *run(void *arg)
{
    struct thread *t = arg;
    CK(cuCtxSetCurrent(ctx));
    CUstream s;
    CUgreenCtx g = NULL;
    if (green)
        s = green_stream(&g);
    else
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    t->s = s;
    CK(cuMemAlloc(&t->d, 4));
    if (graph && launches) {
        CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        for (unsigned long long k = 0; k < launches; k++)
            launch_one(t);
        CK(cuStreamEndCapture(s, &t->g));
        CK(cuGraphInstantiateWithFlags(&t->exec, t->g, 0));
        size_t n = (size_t)launches;
        t->node = calloc(n, sizeof(*t->node));
        if (!t->node) bench_die("%s", "out of memory");
        CK(cuGraphGetNodes(t->g, t->node, &n));
        if (n != launches) bench_die("%s", "the captured graph has not one node per launch");
    }
    issue(t);
    CK(cuStreamSynchronize(s));
    /* --param: the read-back is the step's value where every launch was given it (one by
     * one, or all nodes updated); a graph's stale nodes write the value captured. */
    int known = param && launches && (!t->exec || nupdate == launches);
    if (known && t->v != t->value) bench_die("%s", "fill_u32 wrote a wrong value");
    pthread_barrier_wait(&start);
    uint64_t end = bench_now_ns() + window_ns, n = 0;
    while (bench_now_ns() < end) {
        uint64_t busy = bench_now_ns() + work_us * 1000;
        volatile unsigned x = 0;
        while (bench_now_ns() < busy)
            for (int i = 0; i < 64; i++)
                x += (unsigned)i;
        if (!nlaunchers) {
            issue(t);
        } else {
            atomic_store_explicit(&t->job, 1, memory_order_release);
            while (atomic_load_explicit(&t->job, memory_order_acquire) != 2)
                syscall(SYS_futex, &t->job, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
            atomic_store_explicit(&t->job, 0, memory_order_relaxed);
        }
        CK(cuStreamSynchronize(s));
        if (known && t->v != t->value) bench_die("%s", "an updated graph wrote a stale value");
        n++;
    }
    t->steps = n;
    if (overlap_ms) {
        unsigned long long ns = overlap_ms * 1000000ull;
        void *args[] = {&ns};
        pthread_barrier_wait(&again);
        if (t->index == 0) overlap_t0 = bench_now_ns();
        CK(cuLaunchKernel(spin, 2, 1, 1, 32, 1, 1, 0, s, args, NULL));
        CK(cuStreamSynchronize(s));
        t->overlap_end = bench_now_ns();
    }
    if (t->exec) CK(cuGraphExecDestroy(t->exec));
    if (t->g) CK(cuGraphDestroy(t->g));
    free(t->node);
    CK(cuMemFree(t->d));
    CK(cuStreamDestroy(s));
    if (g) CK(cuGreenCtxDestroy(g));
    return NULL;
}

int main(int argc, char **argv)
{
    bench_prog = "onectx";
    if (argc < 2) usage();
    unsigned long long threads = bench_num_arg(argc, argv, 0, 1, 1024, usage);
    unsigned flags = CU_CTX_SCHED_AUTO;
    const char *sched = "auto";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--work-us") == 0)
            work_us = bench_num_arg(argc, argv, i++, 0, 1000000, usage);
        else if (strcmp(argv[i], "--launches") == 0)
            launches = bench_num_arg(argc, argv, i++, 0, 100000, usage);
        else if (strcmp(argv[i], "--seconds") == 0)
            window_ns = bench_num_arg(argc, argv, i++, 1, 3600, usage) * 1000000000ull;
        else if (strcmp(argv[i], "--sched") == 0 && i + 1 < argc) {
            sched = argv[++i];
            flags = !strcmp(sched, "auto")       ? CU_CTX_SCHED_AUTO
                    : !strcmp(sched, "spin")     ? CU_CTX_SCHED_SPIN
                    : !strcmp(sched, "yield")    ? CU_CTX_SCHED_YIELD
                    : !strcmp(sched, "blocking") ? CU_CTX_SCHED_BLOCKING_SYNC
                                                 : (usage(), 0u);
        } else if (strcmp(argv[i], "--green") == 0)
            green = 1;
        else if (strcmp(argv[i], "--graph") == 0)
            graph = 1;
        else if (strcmp(argv[i], "--param") == 0)
            param = 1;
        else if (strcmp(argv[i], "--update") == 0)
            nupdate = bench_num_arg(argc, argv, i++, 0, 100000, usage);
        else if (strcmp(argv[i], "--overlap-ms") == 0)
            overlap_ms = bench_num_arg(argc, argv, i++, 1, 10000, usage);
        else if (strcmp(argv[i], "--launchers") == 0)
            nlaunchers = bench_num_arg(argc, argv, i++, 1, 64, usage);
        else if (strcmp(argv[i], "--library") == 0 && i + 1 < argc)
            library = !strcmp(argv[++i], "kernel")   ? "kernel"
                      : !strcmp(argv[i], "function") ? "function"
                                                     : (usage(), NULL);
        else
            usage();
    }
    if (nupdate && (!graph || !param || nupdate > launches)) usage();
    bench_step = "setup";
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxSetFlags(dev, flags));
    ctx = bench_use_device(0, &dev);
    CUmodule mod = NULL;
    CUlibrary lib = NULL;
    if (library) {
        char path[PATH_MAX + 32];
        bench_image_path("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx", path, sizeof path);
        char *image = bench_read_file(path);
        CK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
        free(image);
        CUkernel k;
        CK(cuLibraryGetKernel(&k, lib, "empty_kernel"));
        if (!strcmp(library, "kernel"))
            empty = (CUfunction)k;
        else
            CK(cuKernelGetFunction(&empty, k));
    } else {
        empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx",
                                    "empty_kernel", &mod);
    }
    CUmodule fmod = NULL;
    if (param)
        fill = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx", "fill_u32",
                                   &fmod);
    CUmodule smod = NULL;
    if (overlap_ms)
        spin = bench_load_function("MPSSHIM_BENCH_KERNELS", "", "spin.ptx", "spin_ns", &smod);
    pthread_t *th = calloc(threads, sizeof(*th)), lt[64];
    ts = calloc(threads, sizeof(*ts));
    nthreads = threads;
    if (!th || !ts) bench_die("%s", "out of memory");
    for (unsigned long long i = 0; i < nlaunchers; i++)
        if (pthread_create(&lt[i], NULL, launcher, (void *)(uintptr_t)i) != 0)
            bench_die("%s", "pthread_create failed");
    if (pthread_barrier_init(&start, NULL, (unsigned)threads) != 0 ||
        pthread_barrier_init(&again, NULL, (unsigned)threads) != 0)
        bench_die("%s", "pthread_barrier_init failed");
    bench_step = "steps";
    for (unsigned long long i = 0; i < threads; i++) {
        ts[i].index = (int)i;
        if (pthread_create(&th[i], NULL, run, &ts[i]) != 0)
            bench_die("%s", "pthread_create failed");
    }
    uint64_t total = 0, last = 0;
    for (unsigned long long i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        total += ts[i].steps;
        if (ts[i].overlap_end > last) last = ts[i].overlap_end;
    }
    atomic_store(&stop_launchers, 1);
    for (unsigned long long i = 0; i < nlaunchers; i++)
        pthread_join(lt[i], NULL);
    const char *where = green ? "green" : "primary";
    printf("metric steps_per_s %.1f steps/s threads=%llu work_us=%llu launches=%llu sched=%s "
           "streams=%s launchers=%llu graph=%d library=%s param=%d update=%llu\n",
           (double)total * 1e9 / (double)window_ns, threads, work_us, launches, sched, where,
           nlaunchers, graph, library ? library : "no", param, nupdate);
    if (overlap_ms)
        printf("metric overlap_ms %.2f ms threads=%llu kernel_ms=%llu streams=%s\n",
               (double)(last - overlap_t0) / 1e6, threads, overlap_ms, where);
    if (mod) CK(cuModuleUnload(mod));
    if (lib) CK(cuLibraryUnload(lib));
    if (smod) CK(cuModuleUnload(smod));
    if (fmod) CK(cuModuleUnload(fmod));
    return 0;
}
