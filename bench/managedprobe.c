/* managedprobe: the facts issue 31 (managed memory at device speed) must decide on, measured
 * natively, one process standing in for the server and for a client.
 *
 * The design this probes: a managed allocation keeps its host pages in a memfd that the
 * client maps at address A (as today, interpose/managed.c), while in the server the GPU
 * address A is device memory (a VMM mapping reserved at A) and the server reaches the host
 * pages through a second, registered view H of the same memfd. Before GPU work the pages the
 * host changed go H -> A; after it the host's view is made valid again page by page on first
 * touch (a protection fault, or a userfaultfd minor fault, in the client). What it asks:
 *
 *   attributes  the device's managed/pageable access attributes (what CUDA's rules are)
 *   fixed       whether cuMemAddressReserve gives the address asked for: one free in the
 *               CPU's address space, and one inside a PROT_NONE reservation of the process
 *               (where the server's address window keeps clients' mappings)
 *   kernels     STEPS saxpy launches over y at A (device memory) and over y through the
 *               registered host view (what mpsshim does today): seconds each
 *   copies      the whole array H -> A and A -> H; PAGES scattered 4 KiB pages each way, one
 *               cuMemcpyAsync per page and one cuMemcpyBatchAsync for all
 *   faults      (no GPU needed, also --cpu) the host side: a 4 KiB page made valid on first
 *               touch by a SIGSEGV handler (mprotect) and by userfaultfd minor faults on the
 *               memfd (UFFD_FEATURE_MINOR_SHMEM), the cost per page; whether the kernel
 *               lets this user have userfaultfd
 *
 * Prints `probe NAME: what was found` and `metric NAME VALUE UNIT` lines; a step that cannot
 * run says why and the others go on. Not a test: it passes or fails nothing.
 *
 * usage: managedprobe [--cpu] [--mib M] [--steps S] [--pages P]   (64 MiB, 100, 1024) */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096ul
#define BLOCK 256

static void usage(void)
{
    fprintf(stderr, "usage: managedprobe [--cpu] [--mib M] [--steps S] [--pages P]\n");
    exit(2);
}

static size_t bytes;
static unsigned steps = 100, pages = 1024;

static double secs_since(uint64_t t0)
{
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* ------------------------------------------------------------ host faults */

static char *fault_base;
static size_t fault_len;

/* First touch of a protected page: made readable and writable (the copy from the device that
 * would come first is the server's; here only the fault's own cost is measured). */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    char *p = si->si_addr;
    if (p < fault_base || p >= fault_base + fault_len) abort();
    char *page = (char *)((uintptr_t)p & ~(PAGE - 1));
    mprotect(page, PAGE, PROT_READ | PROT_WRITE);
}

static void probe_segv(char *mem, size_t len)
{
    struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    fault_base = mem;
    fault_len = len;
    size_t n = len / PAGE;
    if (mprotect(mem, len, PROT_NONE) != 0) {
        printf("probe segv: mprotect failed: %s\n", strerror(errno));
        return;
    }
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < n; i++)
        mem[i * PAGE] += 1;
    double s = secs_since(t0);
    printf("metric segv_fault_us %.3f us\n", s * 1e6 / (double)n);
    signal(SIGSEGV, SIG_DFL);
}

struct uffd_arg {
    int uffd;
    _Atomic int stop;
    size_t served;
};

/* The fault thread: each minor fault on the memfd mapping is let through (UFFDIO_CONTINUE
 * maps the page the page cache already holds). */
static void *uffd_thread(void *arg)
{
    struct uffd_arg *a = arg;
    while (!a->stop) {
        struct pollfd p = {.fd = a->uffd, .events = POLLIN};
        if (poll(&p, 1, 100) != 1) continue;
        struct uffd_msg m;
        if (read(a->uffd, &m, sizeof m) != sizeof m) continue;
        if (m.event != UFFD_EVENT_PAGEFAULT) continue;
        struct uffdio_continue c = {
            .range = {.start = m.arg.pagefault.address & ~(PAGE - 1), .len = PAGE}};
        if (ioctl(a->uffd, UFFDIO_CONTINUE, &c) != 0) abort(); /* the toucher would hang */
        a->served++;
    }
    return NULL;
}

static void probe_uffd(int fd, size_t len)
{
    /* Non-blocking: the kernel answers poll with POLLERR on a blocking userfaultfd. */
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (uffd < 0) {
        printf("probe uffd: userfaultfd refused: %s (vm.unprivileged_userfaultfd, seccomp)\n",
               strerror(errno));
        return;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_MINOR_SHMEM};
    if (ioctl(uffd, UFFDIO_API, &api) != 0) {
        printf("probe uffd: no minor faults on shared memory: %s\n", strerror(errno));
        close(uffd);
        return;
    }
    /* A mapping of its own whose pages are all in the page cache (written through another). */
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(uffd);
        return;
    }
    struct uffdio_register r = {.range = {.start = (uintptr_t)m, .len = len},
                                .mode = UFFDIO_REGISTER_MODE_MINOR};
    if (ioctl(uffd, UFFDIO_REGISTER, &r) != 0) {
        printf("probe uffd: minor-fault registration refused: %s\n", strerror(errno));
        munmap(m, len);
        close(uffd);
        return;
    }
    struct uffd_arg a = {.uffd = uffd};
    pthread_t t;
    pthread_create(&t, NULL, uffd_thread, &a);
    size_t n = len / PAGE;
    volatile char sink = 0;
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < n; i++)
        sink += m[i * PAGE];
    double s = secs_since(t0);
    (void)sink;
    printf("probe uffd: minor faults served: %zu of %zu pages\n", a.served, n);
    printf("metric uffd_minor_fault_us %.3f us\n", s * 1e6 / (double)n);
    a.stop = 1;
    pthread_join(t, NULL);
    munmap(m, len);
    close(uffd);
}

static void probe_faults(void)
{
    size_t len = bytes < 64 * PAGE * 16 ? bytes : 64 * PAGE * 16; /* 4 MiB at most */
    int fd = memfd_create("managedprobe", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) bench_die("memfd: %s", strerror(errno));
    char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
    memset(mem, 1, len);
    probe_segv(mem, len);
    probe_uffd(fd, len);
    munmap(mem, len);
    close(fd);
}

/* ------------------------------------------------------------ the GPU side */

static void probe_attributes(CUdevice dev)
{
    static const struct {
        CUdevice_attribute a;
        const char *name;
    } at[] = {
        {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "managed_memory"},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "concurrent_managed_access"},
        {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, "pageable_memory_access"},
        {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
         "pageable_access_uses_host_page_tables"},
        {CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST,
         "direct_managed_access_from_host"},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "vmm"},
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, "unified_addressing"},
    };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        int v = -1;
        CUresult r = cuDeviceGetAttribute(&v, at[i].a, dev);
        printf("probe attribute %s: %d%s\n", at[i].name, v, r == CUDA_SUCCESS ? "" : " (error)");
    }
}

/* Device memory of `size` bytes mapped at exactly `want` if the driver gives that address:
 * 1 (mapped there), 0 (it gave another, freed again), -1 (refused). */
static int map_device_at(CUdevice dev, CUdeviceptr want, size_t size,
                         CUmemGenericAllocationHandle *h)
{
    CUdeviceptr got = 0;
    if (cuMemAddressReserve(&got, size, 0, want, 0) != CUDA_SUCCESS) return -1;
    if (got != want) {
        cuMemAddressFree(got, size);
        return 0;
    }
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CK(cuMemCreate(h, size, &prop, 0));
    CK(cuMemMap(got, size, 0, *h, 0));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(got, size, &acc, 1));
    return 1;
}

static void unmap_device(CUdeviceptr a, size_t size, CUmemGenericAllocationHandle h)
{
    CK(cuMemUnmap(a, size));
    CK(cuMemRelease(h));
    CK(cuMemAddressFree(a, size));
}

static double time_saxpy(CUfunction saxpy, CUdeviceptr x, CUdeviceptr y, int n, CUstream s)
{
    float alpha = 1.0f;
    void *args[] = {&alpha, &x, &y, &n};
    CK(cuStreamSynchronize(s));
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < steps; i++)
        CK(cuLaunchKernel(saxpy, (unsigned)((n + BLOCK - 1) / BLOCK), 1, 1, BLOCK, 1, 1, 0, s, args,
                          NULL));
    CK(cuStreamSynchronize(s));
    return secs_since(t0);
}

/* PAGES scattered pages (every 7th, wrapping) each way between the view h and device a. */
static void probe_page_copies(CUdeviceptr a, char *h, CUstream s)
{
    size_t n = bytes / PAGE;
    unsigned k = pages < n ? pages : (unsigned)n;
    CUdeviceptr *dst = calloc(k, sizeof *dst), *src = calloc(k, sizeof *src);
    size_t *sz = calloc(k, sizeof *sz);
    if (!dst || !src || !sz) bench_die("%s", "out of memory");
    for (unsigned i = 0; i < k; i++) {
        size_t off = (size_t)i * 7 % n * PAGE;
        dst[i] = a + off;
        src[i] = (CUdeviceptr)(uintptr_t)(h + off);
        sz[i] = PAGE;
    }
    CK(cuStreamSynchronize(s));
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < k; i++)
        CK(cuMemcpyAsync(dst[i], src[i], PAGE, s));
    CK(cuStreamSynchronize(s));
    printf("metric page_copy_each_us %.3f us\n", secs_since(t0) * 1e6 / k);
    CUmemcpyAttributes at = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
    size_t idx = 0;
    t0 = bench_now_ns();
    CUresult r = cuMemcpyBatchAsync(dst, src, sz, k, &at, &idx, 1, s);
    if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s);
    if (r == CUDA_SUCCESS)
        printf("metric page_copy_batch_us %.3f us\n", secs_since(t0) * 1e6 / k);
    else
        printf("probe batch: cuMemcpyBatchAsync returned %d\n", (int)r);
    free(dst);
    free(src);
    free(sz);
}

static void probe_gpu(void)
{
    CUdevice dev;
    bench_use_device(0, &dev);
    probe_attributes(dev);
    size_t gran = 0;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    bytes = (bytes + gran - 1) / gran * gran;
    int n = (int)(bytes / sizeof(float));

    /* fixed: an address free in the CPU's space (found by mapping and unmapping), then one
     * inside a PROT_NONE reservation that stays. */
    void *probe = mmap(NULL, bytes + gran, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
    CUdeviceptr in_resv = ((CUdeviceptr)(uintptr_t)probe + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h;
    int in = map_device_at(dev, in_resv, bytes, &h);
    printf("probe fixed: an address inside a PROT_NONE reservation of ours: %s\n",
           in == 1   ? "given"
           : in == 0 ? "another given"
                     : "refused");
    if (in == 1) unmap_device(in_resv, bytes, h);
    munmap(probe, bytes + gran);
    int fr = map_device_at(dev, in_resv, bytes, &h);
    printf("probe fixed: the same address once free in the CPU's space: %s\n", fr == 1 ? "given"
                                                                               : fr == 0
                                                                                   ? "another given"
                                                                                   : "refused");
    if (fr != 1) {
        printf("probe: no device memory at a chosen address; the kernels and copies are not run\n");
        return;
    }
    CUdeviceptr a = in_resv;

    /* The host pages: a memfd with a registered view h (the server's), y's initial values. */
    int fd = memfd_create("managedprobe", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) bench_die("memfd: %s", strerror(errno));
    char *hv = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (hv == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
    memset(hv, 0, bytes);
    CK(cuMemHostRegister(hv, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr hd;
    CK(cuMemHostGetDevicePointer(&hd, hv, 0));
    printf("probe registered view: device pointer %s the host pointer\n",
           hd == (CUdeviceptr)(uintptr_t)hv ? "is" : "is not");

    CUmodule mod;
    CUfunction saxpy =
        bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx", "saxpy", &mod);
    CUdeviceptr x;
    CK(cuMemAlloc(&x, bytes));
    CK(cuMemsetD32(x, 0x3f800000u, (size_t)n)); /* 1.0f */
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    printf("metric kernels_over_host_s %.6f s\n", time_saxpy(saxpy, x, hd, n, s));
    uint64_t t0 = bench_now_ns();
    CK(cuMemcpyHtoDAsync(a, hv, bytes, s));
    CK(cuStreamSynchronize(s));
    printf("metric copy_whole_to_device_s %.6f s\n", secs_since(t0));
    printf("metric kernels_over_device_s %.6f s\n", time_saxpy(saxpy, x, a, n, s));
    t0 = bench_now_ns();
    CK(cuMemcpyDtoHAsync(hv, a, bytes, s));
    CK(cuStreamSynchronize(s));
    printf("metric copy_whole_to_host_s %.6f s\n", secs_since(t0));
    /* y: STEPS over the host, STEPS over the device, all of it back: 2 * STEPS everywhere. */
    const float *yv = (const float *)hv;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        bad = yv[i] != (float)(2 * steps);
    printf("probe result: %s\n", bad ? "WRONG values after the round trip" : "right");
    probe_page_copies(a, hv, s);

    CK(cuStreamDestroy(s));
    CK(cuMemFree(x));
    CK(cuModuleUnload(mod));
    CK(cuMemHostUnregister(hv));
    munmap(hv, bytes);
    close(fd);
    unmap_device(a, bytes, h);
}

int main(int argc, char **argv)
{
    bench_prog = "managedprobe";
    setvbuf(stdout, NULL, _IOLBF, 0);
    int cpu_only = 0;
    unsigned long long mib = 64;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cpu") == 0)
            cpu_only = 1;
        else if (strcmp(argv[i], "--mib") == 0)
            mib = bench_num_arg(argc, argv, i++, 1, 65536, usage);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = (unsigned)bench_num_arg(argc, argv, i++, 1, 100000, usage);
        else if (strcmp(argv[i], "--pages") == 0)
            pages = (unsigned)bench_num_arg(argc, argv, i++, 1, 1u << 20, usage);
        else
            usage();
    }
    bytes = (size_t)mib << 20;
    bench_step = "faults";
    probe_faults();
    if (cpu_only) return 0;
    bench_step = "gpu";
    probe_gpu();
    return 0;
}
