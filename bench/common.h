/* Helpers shared by the benchmark programs: failing loudly, the clock, kernel images. */
#ifndef MPSSHIM_BENCH_COMMON_H
#define MPSSHIM_BENCH_COMMON_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* Program name and current step, for failure lines ("FAIL <prog>: <step>: ..."). */
extern const char *bench_prog;
extern const char *bench_step;

/* Exits the program unless `call` returns CUDA_SUCCESS; names the call and the error. */
#define CK(call) bench_check((call), #call, __LINE__)
void bench_check(CUresult r, const char *call, int line);
/* Prints "FAIL <prog>: <step>: " and the message (fmt takes one string), exits 1. */
void bench_die(const char *fmt, const char *arg) __attribute__((noreturn));

uint64_t bench_now_ns(void);
/* The median of n > 0 samples (sorts them in place); of an even count, the mean of the
 * middle two. */
double bench_median_ns(uint64_t *ns, size_t n);

/* <$env>/<file> when $env is set, else <directory of this executable>/<rel><file>. */
void bench_image_path(const char *env, const char *rel, const char *file, char *out, size_t cap);
/* A whole file in a malloc'd buffer with a NUL after it (PTX must end in one). */
char *bench_read_file(const char *path);
/* Loads the image bench_image_path(env, rel, file) names into *mod and returns its
 * function `kernel`. */
CUfunction bench_load_function(const char *env, const char *rel, const char *file,
                               const char *kernel, CUmodule *mod);
/* The spinning kernel `kernel` names, loaded into *mod: spin_ns (bench/spin.cu, beside the
 * executable or in $MPSSHIM_BENCH_KERNELS), else delay_set (tests/kernels, for drivers
 * without spin_ns such as the CPU test driver). The caller has checked it is one of the two. */
CUfunction bench_load_spinner(const char *kernel, CUmodule *mod);
/* The number after option argv[i], in lo..hi; calls usage() (which must not return) when it
 * is missing or malformed. */
unsigned long long bench_num_arg(int argc, char **argv, int i, unsigned long long lo,
                                 unsigned long long hi, void (*usage)(void));
/* Start barrier of processes given the same new `file`: adds this process's arrival to a
 * counter in the file's shared mapping and waits until it reaches `target` (P processes
 * meeting a second time wait for 2P). Fails the program after 60 s. */
void bench_barrier(const char *file, unsigned target);
/* cuInit, then device `ordinal`'s primary context made current (returned); *dev: the device. */
CUcontext bench_use_device(int ordinal, CUdevice *dev);

#endif
