// Shared by the CUDA runtime test programs of tests/cudart: checks and output lines, with the
// contract of tests/progs/common.h. Each program prints one `ok <check>` line per passed
// check and `PASS <prog>` last, then exits 0; a failed check prints
// `FAIL <prog>: <file>:<line>: ...` and exits 1; exit 77 means skipped. Stdout must be the
// same natively and through the shim, so nothing printed depends on timing, addresses,
// pids or handle values.
//
// Kernels: every program defines the kernels it uses with the exact names, parameters and
// bodies of tests/kernels/kernels.cu, extern "C", so that the CPU test driver (tests/cpudrv)
// finds their CPU twins by `.entry` name and parameter layout in CI.
#ifndef MPSSHIM_TESTS_CUDART_COMMON_H
#define MPSSHIM_TESTS_CUDART_COMMON_H

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#define T_SKIP_EXIT 77

static const char *t_name = "?";
static pthread_mutex_t t_out_lock = PTHREAD_MUTEX_INITIALIZER;

// SIGALRM: the program hung. A fixed message, written with async-signal-safe calls only.
static inline void t_on_watchdog(int sig)
{
    (void)sig;
    static const char msg1[] = "FAIL ";
    static const char msg2[] = ": watchdog: still running\n";
    if (write(STDOUT_FILENO, msg1, sizeof(msg1) - 1) < 0 ||
        write(STDOUT_FILENO, t_name, strlen(t_name)) < 0 ||
        write(STDOUT_FILENO, msg2, sizeof(msg2) - 1) < 0) {
        // exiting anyway
    }
    _exit(1);
}

// Names the program, makes stdout line-buffered and arms a watchdog (0 s: none).
static inline void t_init(const char *prog, unsigned watchdog_s)
{
    t_name = prog;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (watchdog_s) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = t_on_watchdog;
        sigaction(SIGALRM, &sa, NULL);
        alarm(watchdog_s);
    }
}

__attribute__((format(printf, 3, 4), noreturn)) static inline void
t_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&t_out_lock);
    printf("FAIL %s: %s:%d: ", t_name, file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(1);
}

// Prints `ok <check>` (safe from any thread).
__attribute__((format(printf, 1, 2))) static inline void t_ok(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&t_out_lock);
    printf("ok ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    pthread_mutex_unlock(&t_out_lock);
}

__attribute__((noreturn)) static inline void t_pass(void)
{
    printf("PASS %s\n", t_name);
    fflush(stdout);
    exit(0);
}

__attribute__((format(printf, 1, 2), noreturn)) static inline void t_skip(const char *fmt, ...)
{
    va_list ap;
    printf("SKIP %s: ", t_name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(T_SKIP_EXIT);
}

static inline void t_check(cudaError_t e, const char *call, const char *file, int line)
{
    if (e != cudaSuccess)
        t_fail(file, line, "%s returned %s (%d): %s", call, cudaGetErrorName(e), (int)e,
               cudaGetErrorString(e));
}

// Fails the program unless `call` returns cudaSuccess.
#define CHECK(call) t_check((call), #call, __FILE__, __LINE__)
// Fails the program unless the host-side condition holds; the message says what was seen.
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) t_fail(__FILE__, __LINE__, __VA_ARGS__);                                      \
    } while (0)
// Checks a launch: the configuration error at once, then the kernel's own at the next sync.
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

// Grid for a grid-stride kernel over n elements: at least 1 block, at most 1024.
static inline unsigned t_blocks_for(uint64_t n, unsigned block)
{
    uint64_t b = (n + block - 1) / block;
    return b < 1 ? 1u : b > 1024 ? 1024u : (unsigned)b;
}

// The pattern of write_pattern/check_pattern.
static inline uint32_t t_pattern_at(uint32_t seed, uint64_t i)
{
    return (uint32_t)(i * 2654435761ull) ^ seed;
}

#endif
