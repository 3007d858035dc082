/* hostfn_fault [DELAY_MS] [--own unregister|load|getfunc|launch|free|unload|ipcclose]: a host
 * function whose touch of managed memory needs this client's own server worker, while another
 * client's call waits for every stream of the shared context (tests/hostfn_gate.sh). A kernel
 * writes 41 into a managed allocation after DELAY_MS (default 2000); a host function queued behind
 * it on the same stream reads that and writes 777 beside it; once both are queued it prints "held",
 * waits 300 ms, prefetches the allocation to the host on the NULL stream (through the shim: a pull
 * after all of the client's work, the first, for which the server makes a stream of its own),
 * synchronises and checks what everyone saw.
 *
 * Through mpsshim, the host function's page fault is served by the client's worker: were the
 * other client's call (unregistering host memory, say) let into the driver while this
 * client's stream is held on its host function, it would wait there for that stream, the
 * worker would be held behind it making the stream, and neither would ever go on (found by
 * tests/managed_kill.sh on an H200).
 *
 * --own: the call that waits for every stream is this process's own, made while its host
 * function is still to run: cuMemHostUnregister of a buffer it registered at start, or a
 * module load (`load`) in place of the prefetch; or one the server may load code for: a
 * function got from a module loaded at start (`getfunc`), the first launch of a library's
 * kernel got at start (`launch`: its code loads in the context then, server/code/launch.c);
 * or cuMemFree of device memory allocated at start (`free`), the unload of a module loaded
 * at start (`unload`), or the close of memory another process exported, opened at start
 * (`ipcclose`, a child forked before any CUDA call exports it): the server waits for the
 * client's streams before each. Natively the
 * call waits for the host function, which goes on; through mpsshim the call must not take the
 * worker the host function's touch needs (interpose/hostfn.c, shim_hostfn_settle). */
#include "tests/progs/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define host(p) ((unsigned *)(uintptr_t)(p)) /* managed memory's host view: the same address */

struct seen {
    unsigned *arr, got;
};

/* Runs on s between the kernel and the prefetch: may use memory attached to s. */
static void CUDA_CB between(void *arg)
{
    struct seen *sn = arg;
    sn->got = sn->arr[0];
    sn->arr[1] = 777;
}

/* --own ipcclose: the child (forked before any CUDA call) exports 1 MiB of device memory
 * through `out` and keeps it until `in` says (or closes). */
static void exporter(int out, int in)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    CUipcMemHandle h;
    CHECK(cuIpcGetMemHandle(&h, d));
    REQUIRE(write(out, &h, sizeof(h)) == (ssize_t)sizeof(h), "write: %s", strerror(errno));
    char done;
    (void)!read(in, &done, 1);
    CHECK(cuMemFree(d));
    exit(0);
}

int main(int argc, char **argv)
{
    t_init("hostfn_fault", 60);
    unsigned long long delay_ms = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000;
    const char *own = argc > 3 && strcmp(argv[2], "--own") == 0 ? argv[3] : NULL;
    static const char *const owns[] = {"unregister", "load",   "getfunc", "launch",
                                       "free",       "unload", "ipcclose"};
    int known = !own;
    for (size_t i = 0; own && i < sizeof(owns) / sizeof(owns[0]); i++)
        known |= !strcmp(own, owns[i]);
    REQUIRE(delay_ms >= 1 && delay_ms <= 20000 && (argc <= 2 || own) && known,
            "usage: hostfn_fault [DELAY_MS] [--own "
            "unregister|load|getfunc|launch|free|unload|ipcclose]");
#define OWN(name) (own && !strcmp(own, name))
    int to_parent[2] = {-1, -1}, to_child[2] = {-1, -1};
    pid_t child = -1;
    CUipcMemHandle exported;
    if (OWN("ipcclose")) {
        REQUIRE(pipe(to_parent) == 0 && pipe(to_child) == 0, "pipe: %s", strerror(errno));
        child = fork();
        REQUIRE(child >= 0, "fork: %s", strerror(errno));
        if (child == 0) {
            close(to_parent[0]);
            close(to_child[1]); /* else the parent's close would never read as the end */
            exporter(to_parent[1], to_child[0]);
        }
        close(to_parent[1]);
        close(to_child[0]);
        REQUIRE(read(to_parent[0], &exported, sizeof(exported)) == (ssize_t)sizeof(exported),
                "the exporting child said nothing");
    }
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUfunction delay = t_get_function(t_load_module("kernels.ptx"), "delay_set");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    CHECK(cuStreamSynchronize(s));
    static unsigned char reg[65536] __attribute__((aligned(4096)));
    if (OWN("unregister")) CHECK(cuMemHostRegister(reg, sizeof(reg), 0));
    size_t ptx_len = 0;
    void *ptx = OWN("load") || OWN("launch") ? t_read_kernel_file("kernels.ptx", &ptx_len) : NULL;
    CUmodule mod2 = OWN("getfunc") || OWN("unload") ? t_load_module("kernels.ptx") : NULL;
    CUlibrary lib = NULL;
    CUkernel kern = NULL;
    if (OWN("launch")) {
        CHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
        CHECK(cuLibraryGetKernel(&kern, lib, "empty_kernel"));
    }
    CUdeviceptr dm = 0;
    if (OWN("free")) CHECK(cuMemAlloc(&dm, 1 << 20));
    if (OWN("ipcclose")) CHECK(cuIpcOpenMemHandle(&dm, exported, 0));
    host(m)[0] = 40;
    host(m)[1] = 1;
    struct seen sn = {host(m), 0};
    unsigned v = 41;
    unsigned long long ns = delay_ms * 1000000ull;
    void *params[] = {&m, &v, &ns};
    CHECK(cuLaunchKernel(delay, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CHECK(cuLaunchHostFunc(s, between, &sn));
    printf("held\n");
    fflush(stdout);
    usleep(300 * 1000);
    if (OWN("unregister")) {
        CHECK(cuMemHostUnregister(reg));
    } else if (OWN("load")) {
        CUmodule again;
        CHECK(cuModuleLoadData(&again, ptx));
        CHECK(cuModuleUnload(again));
    } else if (OWN("getfunc")) {
        CUfunction f;
        CHECK(cuModuleGetFunction(&f, mod2, "inc_u32"));
    } else if (OWN("launch")) {
        CUstream other; /* not behind the host function: only the load may wait for it */
        CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
        CHECK(cuLaunchKernel((CUfunction)kern, 1, 1, 1, 32, 1, 1, 0, other, NULL, NULL));
        CHECK(cuStreamSynchronize(other));
        CHECK(cuStreamDestroy(other));
    } else if (OWN("free")) {
        CHECK(cuMemFree(dm));
    } else if (OWN("unload")) {
        CHECK(cuModuleUnload(mod2));
        mod2 = NULL;
    } else if (OWN("ipcclose")) {
        CHECK(cuIpcCloseMemHandle(dm));
    } else {
        CUmemLocation to_host = {.type = CU_MEM_LOCATION_TYPE_HOST};
        CHECK(cuMemPrefetchAsync_v2(m, 4096, to_host, 0, NULL));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamSynchronize(NULL));
    REQUIRE(sn.got == 41 && host(m)[0] == 41 && host(m)[1] == 777,
            "the host function saw %u; then %u %u", sn.got, host(m)[0], host(m)[1]);
    if (own)
        t_ok("a host function's page fault was served while this process's %s waited for it", own);
    else
        t_ok("a host function's page fault was served while another client's call waited for "
             "every stream");
    CHECK(cuMemFree(m));
    CHECK(cuStreamDestroy(s));
    if (mod2) CHECK(cuModuleUnload(mod2));
    if (lib) CHECK(cuLibraryUnload(lib));
    free(ptx);
    if (child > 0) {
        close(to_child[1]); /* the child frees its memory and leaves */
        int st = 0;
        REQUIRE(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the exporting child failed (status %#x)", st);
    }
    t_pass();
}
