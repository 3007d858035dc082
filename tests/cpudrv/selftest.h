// The CPU test driver's self-test: shared checks and helpers (see selftest.c).
#ifndef CPUDRV_SELFTEST_H
#define CPUDRV_SELFTEST_H

#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

// Failures so far (only the main thread reports; workers count through st_fail).
extern int st_failures;
// Directory holding kernels.ptx, kernels2.ptx, kernels.sm_90.cubin, kernels.fatbin,
// managed.fatbin.
extern const char *st_kdir;

void st_fail(const char *file, int line, const char *what);
void st_failrc(const char *file, int line, const char *what, CUresult got, CUresult want);
// Milliseconds since some fixed point.
double st_ms(void);
// Reads a file (NUL-terminated); exits the test if it cannot.
unsigned char *st_read(const char *name, size_t *len);
// The test kernels' module (PTX) and its functions, loaded by st_load().
extern CUmodule st_mod, st_mod2;
void st_load(void);
CUfunction st_fn(const char *name);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) st_fail(__FILE__, __LINE__, #cond);                                           \
    } while (0)

#define EXPECT(call, want)                                                                         \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != (want)) st_failrc(__FILE__, __LINE__, #call, r_, (want));                        \
    } while (0)

#define CK(call) EXPECT(call, CUDA_SUCCESS)

// Test groups, in the order main() runs them.
void st_errors_and_init(void);
void st_devices(void);
void st_contexts(void);
void st_memory(void);
void st_copies(void);
void st_copies_3d(void);
void st_streams(void);
void st_events(void);
void st_memops(void);
void st_mempool(void);
void st_vmm(void);
void st_graph(void);
void st_capture_alloc(void);
void st_graph_cond(void);
void st_modules(void);
void st_managed_vars(void);
void st_images(void);
void st_twins(void);
void st_launch_errors(void);
void st_variants(void);
void st_threads(void);
void st_green(void);
void st_faults(void);
void st_fuzz(void);
void st_env(void);
// The child process of st_env.
int st_env_child(void);

#endif
