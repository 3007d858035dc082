/* Shared by the test programs of tests/progs: checks, output lines, kernel images, patterns.
 *
 * Every program prints one `ok <check>` line per passed check and `PASS <prog>` last, then
 * exits 0; a failed check prints `FAIL <prog>: <file>:<line>: ...` and exits 1; exit 77 means
 * skipped. Stdout must be identical natively and through the shim, so nothing printed may
 * depend on timing, addresses, pids or handle values. */
#ifndef MPSSHIM_TESTS_PROGS_COMMON_H
#define MPSSHIM_TESTS_PROGS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#define T_SKIP_EXIT 77

/* Fails the program unless `call` returns CUDA_SUCCESS. */
#define CHECK(call) t_check((call), #call, __FILE__, __LINE__)
/* Fails the program unless `call` returns exactly `want`. */
#define EXPECT(call, want) t_expect((call), (want), #call, __FILE__, __LINE__)
/* Fails the program if `call` succeeds; returns the error it gave. */
#define EXPECT_ERR(call) t_expect_err((call), #call, __FILE__, __LINE__)
/* Fails the program unless the host-side condition holds; the message says what was seen. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) t_fail(__FILE__, __LINE__, __VA_ARGS__);                                      \
    } while (0)

/* Names the program for output lines, makes stdout line-buffered and arms a watchdog that
 * fails the program after `watchdog_s` seconds (0: none) so that a hang is a failure. */
void t_init(const char *prog, unsigned watchdog_s);
/* The name given to t_init. */
const char *t_prog(void);

void t_check(CUresult r, const char *call, const char *file, int line);
void t_expect(CUresult r, CUresult want, const char *call, const char *file, int line);
CUresult t_expect_err(CUresult r, const char *call, const char *file, int line);
void t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* Prints `ok <formatted check name>` and flushes (safe from any thread). */
void t_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints `PASS <prog>` and exits 0. */
void t_pass(void) __attribute__((noreturn));
/* Prints `SKIP <prog>: <reason>` and exits 77. */
void t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Pipe I/O between the processes of a test: all n bytes, failing the program on error.
 * t_read_all returns 1 when n bytes were read, 0 at end of file. */
void t_write_all(int fd, const void *p, size_t n);
int t_read_all(int fd, void *p, size_t n);
/* One byte of a test's step protocol between its processes: t_hear fails the program
 * (naming `who`) unless the next byte is `want`. */
void t_say(int fd, char c);
void t_hear(int fd, char want, const char *who);

/* A file descriptor over a Unix socket (SCM_RIGHTS), failing the program on error. */
void t_send_fd(int sock, int fd);
int t_recv_fd(int sock);

/* Seconds on the monotonic clock, for a program's own timings. */
double t_now_s(void);
/* The name of a CUresult, "?" when the driver does not know it. */
const char *t_errname(CUresult r);

/* 1 when `flag` (e.g. "--quick") is among argv[1..]. */
int t_has_flag(int argc, char **argv, const char *flag);

/* cuInit(0), device 0, its primary context retained and made current. */
void t_setup(CUdevice *dev, CUcontext *ctx);

/* Reads the file `name` from the kernel directory ($MPSSHIM_TEST_KERNELS, else the directory
 * of this executable) into a malloc'd buffer with a NUL after the last byte (PTX needs it).
 * Fails the program when the file cannot be read. */
void *t_read_kernel_file(const char *name, size_t *len);
/* Loads kernel image `name` with cuModuleLoadData. */
CUmodule t_load_module(const char *name);
/* cuModuleGetFunction that fails the program on error. */
CUfunction t_get_function(CUmodule mod, const char *name);

/* Blocks for a grid-stride kernel over n elements with `block` threads: at least 1, at most
 * 1024 (the loops inside the kernels cover the rest). */
unsigned t_blocks_for(uint64_t n, unsigned block);

/* The pattern of write_pattern/check_pattern in tests/kernels/kernels.cu. */
static inline uint32_t t_pattern_at(uint32_t seed, uint64_t i)
{
    return (uint32_t)(i * 2654435761ull) ^ seed;
}
/* Fills `bytes` bytes with the pattern, word i holding t_pattern_at(seed, i) in little-endian
 * byte order; a trailing partial word gets that word's leading bytes. */
void t_fill_pattern(void *p, size_t bytes, uint32_t seed);
/* Offset of the first byte that differs from t_fill_pattern(.., bytes, seed), or SIZE_MAX. */
size_t t_pattern_mismatch(const void *p, size_t bytes, uint32_t seed);
/* Offset of the first byte of p[0..bytes) that is not `value`, or SIZE_MAX. */
size_t t_bytes_mismatch(const void *p, size_t bytes, uint8_t value);

#endif
