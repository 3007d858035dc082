/* See common.h. */
#define _GNU_SOURCE
#include "bench/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *bench_prog = "bench";
const char *bench_step = "setup";

void bench_check(CUresult r, const char *call, int line)
{
    if (r == CUDA_SUCCESS) return;
    const char *name = NULL;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "?";
    printf("FAIL %s: %s: line %d: %s returned %s (%d)\n", bench_prog, bench_step, line, call, name,
           (int)r);
    fflush(stdout);
    exit(1);
}

void bench_die(const char *fmt, const char *arg)
{
    printf("FAIL %s: %s: ", bench_prog, bench_step);
    printf(fmt, arg);
    printf("\n");
    fflush(stdout);
    exit(1);
}

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double bench_median_ns(uint64_t *ns, size_t n)
{
    qsort(ns, n, sizeof *ns, cmp_u64);
    return n % 2 ? (double)ns[n / 2] : ((double)ns[n / 2 - 1] + (double)ns[n / 2]) / 2;
}

void bench_image_path(const char *env, const char *rel, const char *file, char *out, size_t cap)
{
    const char *dir = getenv(env);
    if (dir && *dir) {
        snprintf(out, cap, "%s/%s", dir, file);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) bench_die("readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, cap, "%s/%s%s", exe, rel, file);
}

char *bench_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) bench_die("cannot open %s (set MPSSHIM_TEST_KERNELS)", path);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *grown = realloc(buf, cap + 1);
        if (!grown) free(buf);
        buf = grown;
    }
    if (!buf || ferror(f)) bench_die("cannot read %s", path);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* The mapping stays for the life of the process, so that a process can meet again. Waiters
 * sleep between looks, leaving the CPUs to the processes still setting up; start skew
 * stays about 0.1 ms. */
void bench_barrier(const char *file, unsigned target)
{
    static _Atomic unsigned *arrived;
    if (!arrived) {
        int fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) bench_die("barrier: cannot open %s", file);
        /* Every process extends it to the same size: later calls change nothing. */
        if (ftruncate(fd, 4096) != 0) bench_die("barrier: cannot size %s", file);
        void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) bench_die("barrier: cannot map %s", file);
        arrived = m;
    }
    atomic_fetch_add(arrived, 1);
    uint64_t give_up = bench_now_ns() + 60ull * 1000000000ull;
    while (atomic_load(arrived) < target) {
        if (bench_now_ns() > give_up) {
            printf("FAIL %s: %s: barrier: %u of %u arrivals in 60 s\n", bench_prog, bench_step,
                   atomic_load(arrived), target);
            exit(1);
        }
        struct timespec ts = {.tv_nsec = 20000};
        nanosleep(&ts, NULL);
    }
}

CUfunction bench_load_function(const char *env, const char *rel, const char *file,
                               const char *kernel, CUmodule *mod)
{
    char path[PATH_MAX + 32];
    bench_image_path(env, rel, file, path, sizeof path);
    char *image = bench_read_file(path);
    CUfunction f;
    CK(cuModuleLoadData(mod, image));
    free(image);
    CK(cuModuleGetFunction(&f, *mod, kernel));
    return f;
}

CUfunction bench_load_spinner(const char *kernel, CUmodule *mod)
{
    if (strcmp(kernel, "spin_ns") == 0)
        return bench_load_function("MPSSHIM_BENCH_KERNELS", "", "spin.ptx", kernel, mod);
    return bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx", kernel, mod);
}

unsigned long long bench_num_arg(int argc, char **argv, int i, unsigned long long lo,
                                 unsigned long long hi, void (*usage)(void))
{
    if (i + 1 >= argc) usage();
    char *end;
    errno = 0;
    unsigned long long v = strtoull(argv[i + 1], &end, 10);
    if (errno || end == argv[i + 1] || *end || v < lo || v > hi) usage();
    return v;
}

CUcontext bench_use_device(int ordinal, CUdevice *dev)
{
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(dev, ordinal));
    CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
    CK(cuCtxSetCurrent(ctx));
    return ctx;
}
