/* fleetc: one process of a driver-API "inference fleet", the shape of bench/fleet.py's
 * PyTorch clients without Python: each step spends some CPU time of its own (a framework's
 * host work), launches a few small kernels on the legacy stream, and reads 4 bytes back
 * with a synchronous copy (what `.item()` does). It counts the steps it finishes in a fixed
 * time from a common start and prints `metric steps_per_s <n> steps/s <repeat>` (and, as
 * notes, when each window starts and ends: `# window_start_s`, `# window_s`). bench/run.sh
 * starts P copies at once; the sum over them of one repeat is the fleet's throughput. With
 * many processes on few cores it measures what every wait for a reply costs the CPUs that
 * the processes share (spinning threads take them from the ones with work), which is where
 * mpsshim fell behind MPS.
 *
 * usage: fleetc [--seconds S] [--work-us W] [--launches K] [--spread]
 *               [--barrier FILE --procs P] [--repeats R]
 * Defaults: 1 s (a decimal), 100 us of host work, 8 launches of tests/kernels' empty_kernel per
 * step, 1 repeat. --spread: the host work comes in K equal parts, one before each launch, as
 * an interpreter's launches come tens of microseconds apart (PyTorch's: 10-40 us), in place of
 * all before the step's burst of launches; what the server's rule for replaying a client's
 * repeated launches as a graph (server/code/seqgraph.c, MPSSHIM_LAUNCH_GRAPH_GAP_US) meets
 * with a PyTorch fleet, without PyTorch. --barrier: the P processes given the same (new) FILE start
 * each of the R repeats together (one metric line each); the process is set up once, as a server
 * is. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr, "usage: fleetc [--seconds S] [--work-us W] [--launches K] [--spread] "
                    "[--barrier FILE --procs P] [--repeats R]\n");
    exit(2);
}

/* Keeps this thread busy for `ns`, as host code between launches does. */
static void host_work(uint64_t ns)
{
    uint64_t end = bench_now_ns() + ns;
    volatile unsigned x = 0;
    while (bench_now_ns() < end)
        for (int i = 0; i < 64; i++)
            x += (unsigned)i;
}

/* This process's CPU time so far (user + system, all its threads, the shim's included), ns. */
static uint64_t cpu_ns(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return (uint64_t)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000ull +
           (uint64_t)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000ull;
}

/* CPU-seconds the machine's CPUs have spent busy since boot (/proc/stat: all but idle and
 * iowait), or a negative number where it cannot be read. */
static double machine_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                       &v[4], &v[5], &v[6], &v[7])
              : 0;
    if (f) fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n != 8 || hz <= 0) return -1;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

/* The window of one repeat in ns: --seconds' decimal, 1 ms to 1 h. */
static uint64_t window_arg(int argc, char **argv, int i)
{
    if (i + 1 >= argc) usage();
    char *end;
    double s = strtod(argv[i + 1], &end);
    if (end == argv[i + 1] || *end || !(s >= 0.001 && s <= 3600)) usage();
    return (uint64_t)(s * 1e9);
}

int main(int argc, char **argv)
{
    bench_prog = "fleetc";
    unsigned long long work_us = 100, launches = 8, procs = 1, repeats = 1;
    uint64_t window_ns = 1000000000ull;
    const char *barrier = NULL;
    int spread = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0)
            window_ns = window_arg(argc, argv, i++);
        else if (strcmp(argv[i], "--repeats") == 0)
            repeats = bench_num_arg(argc, argv, i++, 1, 1000, usage);
        else if (strcmp(argv[i], "--work-us") == 0)
            work_us = bench_num_arg(argc, argv, i++, 0, 1000000, usage);
        else if (strcmp(argv[i], "--launches") == 0)
            launches = bench_num_arg(argc, argv, i++, 0, 100000, usage);
        else if (strcmp(argv[i], "--procs") == 0)
            procs = bench_num_arg(argc, argv, i++, 1, 4096, usage);
        else if (strcmp(argv[i], "--spread") == 0)
            spread = 1;
        else if (strcmp(argv[i], "--barrier") == 0 && i + 1 < argc)
            barrier = argv[++i];
        else
            usage();
    }
    bench_step = "setup";
    CUdevice dev;
    bench_use_device(0, &dev);
    CUmodule mod;
    CUfunction empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx",
                                           "empty_kernel", &mod);
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 4));
    CK(cuMemsetD32(d, 7, 1));
    uint32_t v = 0;
    /* One step before the barrier: code loaded, every path warm. */
    CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuMemcpyDtoH(&v, d, sizeof(v)));
    if (v != 7) bench_die("read back %s instead of 7", "another value");
    printf("# fleetc: pid %d, %llu processes, %llu us of host work%s and %llu launches per step, "
           "%.3f s x %llu repeats\n",
           (int)getpid(), procs, work_us, spread && launches ? " spread between" : "", launches,
           (double)window_ns / 1e9, repeats);
    /* --spread: each launch's share of the host work, and what is left for the step's start */
    uint64_t part_ns = spread && launches ? work_us * 1000 / launches : 0;
    uint64_t first_ns = work_us * 1000 - part_ns * launches;
    bench_step = "steps";
    for (unsigned long long r = 1; r <= repeats; r++) {
        /* Repeat r starts when all P processes have arrived r times. */
        if (barrier) bench_barrier(barrier, (unsigned)(procs * r));
        double busy0 = machine_busy_s();
        uint64_t c0 = cpu_ns(), t0 = bench_now_ns(), end = t0 + window_ns, steps = 0, now;
        /* When the window starts (CLOCK_MONOTONIC), for a tool reading the machine meanwhile
         * (bench/cpusplit.py). */
        printf("# window_start_s %.6f %llu\n", (double)t0 / 1e9, r);
        fflush(stdout);
        do {
            host_work(first_ns);
            for (unsigned long long k = 0; k < launches; k++) {
                if (part_ns) host_work(part_ns);
                CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
            }
            CK(cuMemcpyDtoH(&v, d, sizeof(v)));
            steps++;
        } while ((now = bench_now_ns()) < end);
        if (v != 7) bench_die("read back %s instead of 7", "another value");
        printf("# window_s %.6f %.6f %llu steps %llu\n", (double)t0 / 1e9, (double)now / 1e9, r,
               (unsigned long long)steps);
        printf("metric steps_per_s %.1f steps/s %llu\n", (double)steps * 1e9 / (double)(now - t0),
               r);
        /* Where a fleet's CPUs go: this process's CPU per step (the host work's included), and
         * the CPUs the whole machine kept busy over the window (bench/run.sh's fleetc_cpu_us:
         * that over the fleet's steps/s; through a server its workers' share is in it). */
        double busy1 = machine_busy_s();
        printf("metric cpu_us_per_step %.2f us %llu\n",
               (double)(cpu_ns() - c0) / 1e3 / (double)steps, r);
        if (busy0 >= 0 && busy1 >= 0)
            printf("metric machine_cpus %.3f cpus %llu\n",
                   (busy1 - busy0) / ((double)(now - t0) / 1e9), r);
        fflush(stdout);
    }
    CK(cuMemFree(d));
    CK(cuModuleUnload(mod));
    return 0;
}
