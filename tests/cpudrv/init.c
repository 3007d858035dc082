// Driver initialisation, configuration from the environment, tracing and counters.
#include "cpudrv.h"

#include <cudaProfiler.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t cpudrv_big = PTHREAD_MUTEX_INITIALIZER;

// Written once by the first successful cuInit (under cpudrv_big), read-only afterwards.
int cpudrv_ndev;
int cpudrv_first;
size_t cpudrv_mem_bytes;
long cpudrv_copy_delay_us;
long cpudrv_release_delay_ms;
long cpudrv_ctx_delay_ms;
int cpudrv_faults_per_context;
long cpudrv_fault_after_store;
__thread struct cpudrv_stream *cpudrv_stored_on;
// Protected by cpudrv_big.
struct cpudrv_device cpudrv_devs[CPUDRV_MAX_DEVICES];
struct cpudrv_stats cpudrv_stats;

// Set by cuInit; atomic so every entry point can test it without the lock.
static int initialized;
// Read once when the library is loaded; read-only afterwards.
static int trace_on;
static const char *stats_path;
// Atomic counter for cpudrv_next_id.
static unsigned long long id_counter;

// Takes cpudrv_big.
void cpudrv_lock(void)
{
    pthread_mutex_lock(&cpudrv_big);
}

// Releases cpudrv_big.
void cpudrv_unlock(void)
{
    pthread_mutex_unlock(&cpudrv_big);
}

static void print_stats(void)
{
    fprintf(stderr,
            "cpudrv[%d]: contexts created %lu live %lu max %lu, primary activations %lu "
            "active %lu, green created %lu live %lu\n",
            (int)getpid(), cpudrv_stats.ctx_created, cpudrv_stats.ctx_live,
            cpudrv_stats.ctx_live_max, cpudrv_stats.prim_activations, cpudrv_stats.prim_active,
            cpudrv_stats.green_created, cpudrv_stats.green_live);
}

// With tracing on, the counters are printed once when the library is unloaded.
__attribute__((destructor)) static void cpudrv_fini(void)
{
    if (trace_on) print_stats();
}

// Tracing and the counters file are chosen when the library is loaded.
__attribute__((constructor)) static void cpudrv_load(void)
{
    const char *t = getenv("MPSSHIM_CPUDRV_TRACE");
    trace_on = t && *t && strcmp(t, "0") != 0;
    stats_path = getenv("MPSSHIM_CPUDRV_STATS");
    if (stats_path && !*stats_path) stats_path = NULL;
}

// Rewrites $MPSSHIM_CPUDRV_STATS after a counter changed; cpudrv_big held.
void cpudrv_stats_changed(void)
{
    if (!stats_path) return;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", stats_path, (int)getpid()) >= (int)sizeof tmp)
        return;
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    // One key=value per line so shell tests can grep them.
    fprintf(f,
            "contexts_created=%lu\ncontexts_live=%lu\ncontexts_live_max=%lu\n"
            "primary_activations=%lu\nprimary_active=%lu\ngreen_created=%lu\ngreen_live=%lu\n",
            cpudrv_stats.ctx_created, cpudrv_stats.ctx_live, cpudrv_stats.ctx_live_max,
            cpudrv_stats.prim_activations, cpudrv_stats.prim_active, cpudrv_stats.green_created,
            cpudrv_stats.green_live);
    if (fclose(f) == 0)
        rename(tmp, stats_path);
    else
        unlink(tmp);
}

// Prints "name -> result" on stderr when MPSSHIM_CPUDRV_TRACE=1; returns rc.
CUresult cpudrv_trace(const char *fn, CUresult rc)
{
    if (trace_on) {
        const char *n = cpudrv_errname(rc);
        if (n)
            fprintf(stderr, "cpudrv[%d]: %s -> %s\n", (int)getpid(), fn, n);
        else
            fprintf(stderr, "cpudrv[%d]: %s -> %d\n", (int)getpid(), fn, (int)rc);
    }
    return rc;
}

static void say(const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "cpudrv[%d]: %s\n", (int)getpid(), line);
}

// Prints one line on stderr when MPSSHIM_CPUDRV_TRACE=1 (what a call really did).
void cpudrv_note(const char *fmt, ...)
{
    if (!trace_on) return;
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
}

// Prints one line on stderr, always (load failures name the kernel they failed on).
void cpudrv_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
}

// Monotonic clock in nanoseconds.
uint64_t cpudrv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Process-wide unique, never reused ids (contexts, streams, buffers).
unsigned long long cpudrv_next_id(void)
{
    return __atomic_add_fetch(&id_counter, 1, __ATOMIC_RELAXED);
}

// CUDA_SUCCESS once cuInit succeeded, CUDA_ERROR_NOT_INITIALIZED before.
int cpudrv_env_level(const char *name, int max, int *cache)
{
    if (*cache < 0) {
        const char *v = getenv(name);
        *cache = v && *v >= '1' && *v <= '0' + max ? *v - '0' : 0;
    }
    return *cache;
}

CUresult cpudrv_ready(void)
{
    return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                           : CUDA_ERROR_NOT_INITIALIZED;
}

// CUDA_ERROR_INVALID_DEVICE unless dev is a valid ordinal (driver initialised).
CUresult cpudrv_dev_check(CUdevice dev)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    return dev >= 0 && dev < cpudrv_ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static long env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        cpudrv_warn("ignoring %s=%s (want %ld..%ld)", name, v, lo, hi);
        return def;
    }
    return x;
}

// Initialise the driver; only flags == 0 is valid, as in the real driver.
CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    if (!initialized) {
        cpudrv_ndev = (int)env_long("MPSSHIM_CPUDRV_DEVICES", 1, 1, CPUDRV_MAX_DEVICES);
        // CUDA_VISIBLE_DEVICES naming one device by its index (as a server of one GPU is
        // started: MPSSHIM_SERVER_PER_GPU): that device alone, as device 0 with its own
        // identity (UUID, PCI bus). Any other value is not applied here.
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (vis && *vis && strspn(vis, "0123456789") == strlen(vis) && strlen(vis) < 3 &&
            atoi(vis) < cpudrv_ndev) {
            cpudrv_first = atoi(vis);
            cpudrv_ndev = 1;
        }
        cpudrv_mem_bytes = (size_t)env_long("MPSSHIM_CPUDRV_MEM_MB", 16384, 1, 1L << 24) << 20;
        cpudrv_copy_delay_us = env_long("MPSSHIM_CPUDRV_COPY_DELAY_US", 0, 0, 10 * 1000 * 1000);
        cpudrv_release_delay_ms = env_long("MPSSHIM_CPUDRV_RELEASE_DELAY_MS", 0, 0, 60 * 1000);
        // A context's making takes 0.6 s on an H200, and seconds beside other processes'
        // makings: tests that need a server's quiet context late (tests/leave_beside.sh) ask.
        cpudrv_ctx_delay_ms = env_long("MPSSHIM_CPUDRV_CTX_DELAY_MS", 0, 0, 60 * 1000);
        cpudrv_faults_per_context = (int)env_long("MPSSHIM_CPUDRV_FAULTS_PER_CONTEXT", 0, 0, 1);
        cpudrv_fault_after_store = env_long("MPSSHIM_CPUDRV_FAULT_AFTER_STORE", 0, 0, 1L << 30);
        // A real cuInit takes a while (hundreds of ms on an H200): tests that need clients
        // to arrive while a server starts (tests/recycle.sh) ask for as long.
        long delay_ms = env_long("MPSSHIM_CPUDRV_INIT_DELAY_MS", 0, 0, 60 * 1000);
        if (delay_ms) usleep((useconds_t)delay_ms * 1000);
        CUresult rc = CUDA_SUCCESS;
        for (int d = 0; d < cpudrv_ndev && !rc; d++)
            rc = cpudrv_ctx_new(d, 0, 1, &cpudrv_devs[d].primary);
        if (rc) {
            cpudrv_unlock();
            return TR(rc);
        }
        __atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
    }
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// The CUDA version this driver implements (13.0); works before cuInit.
CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion) return TR(CUDA_ERROR_INVALID_VALUE);
    *driverVersion = CUDA_VERSION;
    return TR(CUDA_SUCCESS);
}

// Profiler control: there is no profiler behind this driver; accepted.
CUresult cuProfilerStart(void)
{
    return TR(cpudrv_ready());
}

// Profiler control: accepted.
CUresult cuProfilerStop(void)
{
    return TR(cpudrv_ready());
}

// Deprecated profiler configuration: accepted and ignored.
CUresult cuProfilerInitialize(const char *configFile, const char *outputFile,
                              CUoutput_mode outputMode)
{
    (void)configFile;
    (void)outputFile;
    (void)outputMode;
    return TR(cpudrv_ready());
}
