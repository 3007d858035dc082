/* faultns [same]: a developer's probe for the GPU machine (issue 30). Is a sticky fault the
 * process's, or the state of the driver library that saw it?
 *
 * With driver 580 on two H200s, a fault in a process's context on device 0 is answered by
 * its context on device 1 too, and by one made there anew (tests/progs/fault.c --device1): the
 * server, which holds every device's shared context in one process, loses all its GPUs' clients
 * to one fault, where MPS keeps a fault to its GPU. If the state is the library's, a server could
 * keep one instance of the driver per device (dlmopen, a link namespace each) in one process.
 *
 * Two instances of the driver in this process, each loaded into a link namespace of its own:
 * A on device 0, B on device 1 (with `same`: device 0 too). B fills memory with fill_u32 and
 * reads it back; A's fill_u32 writes through a wild pointer (the fault); then B's round runs
 * again, and A is asked on device 1 as well. Each answer is printed; nothing is asserted.
 *
 * The answer, H200, driver 580.159.04 (2026-11-29, `faultns same`): there is no second
 * instance. B's cuInit, after A's, returns CUDA_ERROR_OPERATING_SYSTEM: what refuses it is the
 * process's, not the library's. Most likely (not shown) UVM's: that machine's nvidia_uvm has
 * uvm_enable_va_space_mm=1, which ties a UVM address space to the process's memory map. So one
 * server process cannot keep faults to a GPU; a process per GPU can (docs/operations.md, "A
 * server per GPU").
 *
 * The driver: MPSSHIM_DRIVER, else libcuda.so.1; the kernel: kernels.ptx of
 * MPSSHIM_TEST_KERNELS (the build's tests/ folder). On the CPU test driver it only shows that
 * the probe runs (that driver is a plain library: its state is per instance anyway). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4096

struct drv {
    const char *name;
    void *h;
    CUresult (*init)(unsigned);
    CUresult (*count)(int *);
    CUresult (*dev_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*sync)(void);
    CUresult (*errname)(CUresult, const char **);
    CUcontext ctx[2];
    CUfunction fill[2];
};

static const char *name_of(struct drv *d, CUresult r)
{
    const char *s = NULL;
    if (d->errname && d->errname(r, &s) == CUDA_SUCCESS && s) return s;
    return "?";
}

static void *sym(struct drv *d, const char *s)
{
    void *p = dlsym(d->h, s);
    if (!p) {
        fprintf(stderr, "faultns: %s: no %s\n", d->name, s);
        exit(2);
    }
    return p;
}

/* A link namespace of its own for the driver (a second copy of its state, and of libc's). */
static void open_drv(struct drv *d, const char *name, const char *path)
{
    d->name = name;
    d->h = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    if (!d->h) {
        fprintf(stderr, "faultns: %s: dlmopen %s: %s\n", name, path, dlerror());
        exit(2);
    }
    d->init = sym(d, "cuInit");
    d->count = sym(d, "cuDeviceGetCount");
    d->dev_get = sym(d, "cuDeviceGet");
    d->retain = sym(d, "cuDevicePrimaryCtxRetain");
    d->set_current = sym(d, "cuCtxSetCurrent");
    d->load = sym(d, "cuModuleLoadData");
    d->get_function = sym(d, "cuModuleGetFunction");
    d->alloc = sym(d, "cuMemAlloc_v2");
    d->dtoh = sym(d, "cuMemcpyDtoH_v2");
    d->launch = sym(d, "cuLaunchKernel");
    d->sync = sym(d, "cuCtxSynchronize");
    d->errname = sym(d, "cuGetErrorName");
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

/* Device dev's primary context in instance d, current, with fill_u32 loaded: its error. */
static CUresult setup(struct drv *d, int dev, const char *ptx)
{
    CUdevice cd;
    CUmodule m;
    CUresult r = d->dev_get(&cd, dev);
    if (!r) r = d->retain(&d->ctx[dev], cd);
    if (!r) r = d->set_current(d->ctx[dev]);
    if (!r) r = d->load(&m, ptx);
    if (!r) r = d->get_function(&d->fill[dev], m, "fill_u32");
    return r;
}

/* fill_u32 over N words at p (or through p, a wild pointer) in device dev's context of d,
 * then a synchronisation; with check, the words read back. */
static CUresult round_on(struct drv *d, int dev, CUdeviceptr p, unsigned value, int check)
{
    static unsigned host[N];
    unsigned long long n = N;
    void *args[] = {&p, &value, &n};
    CUresult r = d->set_current(d->ctx[dev]);
    if (!r) r = d->launch(d->fill[dev], N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
    if (!r) r = d->sync();
    if (!r && check) r = d->dtoh(host, p, sizeof(host));
    for (int i = 0; !r && check && i < N; i++)
        if (host[i] != value) {
            printf("  %s: word %d is %u, not %u\n", d->name, i, host[i], value);
            return CUDA_ERROR_UNKNOWN;
        }
    return r;
}

int main(int argc, char **argv)
{
    int same = argc > 1 && strcmp(argv[1], "same") == 0;
    const char *path = getenv("MPSSHIM_DRIVER") ? getenv("MPSSHIM_DRIVER") : "libcuda.so.1";
    const char *dir = getenv("MPSSHIM_TEST_KERNELS");
    char ptxpath[4096];
    snprintf(ptxpath, sizeof(ptxpath), "%s/kernels.ptx", dir ? dir : "build/tests");
    char *ptx = read_file(ptxpath);
    if (!ptx) {
        fprintf(stderr, "faultns: cannot read %s (MPSSHIM_TEST_KERNELS)\n", ptxpath);
        return 2;
    }
    struct drv a = {0}, b = {0};
    open_drv(&a, "A", path);
    open_drv(&b, "B", path);
    int n = 0;
    CUresult r;
    /* Each instance's answer on its own line: with driver 580 on an H200 the second cuInit
     * answered CUDA_ERROR_OPERATING_SYSTEM, which says a resource of the process (not of the
     * library) refused a second user. */
    if ((r = a.init(0))) {
        printf("A's cuInit: %s\n", name_of(&a, r));
        return 2;
    }
    if ((r = b.init(0))) {
        printf("B's cuInit, after A's: %s\n", name_of(&b, r));
        return 2;
    }
    if ((r = a.count(&n))) {
        printf("A's cuDeviceGetCount: %s\n", name_of(&a, r));
        return 2;
    }
    int bdev = same ? 0 : 1;
    if (!same && n < 2) {
        printf("SKIP faultns: needs two devices (or `same`), found %d\n", n);
        return 77;
    }
    printf("driver %s, two instances (dlmopen); A on device 0, B on device %d\n", path, bdev);
    CUdeviceptr pa = 0, pb = 0;
    if ((r = setup(&a, 0, ptx)) || (r = a.alloc(&pa, N * 4)) || (r = round_on(&a, 0, pa, 5, 1))) {
        printf("A's setup on device 0: %s\n", name_of(&a, r));
        return 2;
    }
    if ((r = setup(&b, bdev, ptx)) || (r = b.alloc(&pb, N * 4))) {
        printf("B's setup on device %d: %s\n", bdev, name_of(&b, r));
        return 2;
    }
    printf("B's round before A's fault: %s\n", name_of(&b, round_on(&b, bdev, pb, 7, 1)));
    CUresult ad1 = CUDA_SUCCESS;
    if (n >= 2) ad1 = setup(&a, 1, ptx);
    printf("A's context on device 1 before the fault: %s\n",
           n >= 2 ? name_of(&a, ad1) : "(one device)");
    r = round_on(&a, 0, (CUdeviceptr)0x1000, 1, 0);
    printf("A's round through a wild pointer: %s\n", name_of(&a, r));
    printf("A's round on device 0 after it: %s\n", name_of(&a, round_on(&a, 0, pa, 6, 1)));
    if (n >= 2 && !ad1) {
        CUdeviceptr p1 = 0;
        r = a.set_current(a.ctx[1]);
        if (!r) r = a.alloc(&p1, N * 4);
        if (!r) r = round_on(&a, 1, p1, 8, 1);
        printf("A's round on device 1 after it: %s\n", name_of(&a, r));
    }
    printf("B's round on device %d after A's fault: %s\n", bdev,
           name_of(&b, round_on(&b, bdev, pb, 9, 1)));
    return 0;
}
