/* Without a server, the process still runs: like an MPS client that finds no daemon, it
 * says so once on stderr and uses the real driver directly (no sharing then). The real
 * driver is loaded by absolute path with RTLD_DEEPBIND, so that its own calls to driver
 * functions bind inside it and never to the shim's exported symbols. */
#define _GNU_SOURCE
#include "interpose/shim.h"
#include "channel/settings.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Atomic int shim_mode;

/* Resolved once when the mode becomes SHIM_MODE_REAL; read-only afterwards. */
static void *real_fns[SHIM_NCALLS];

static CUresult real_missing(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

void *shim_real(int id)
{
    void *f = id >= 0 && id < SHIM_NCALLS ? real_fns[id] : NULL;
    return f ? f : (void *)real_missing;
}

/* Where the real libcuda.so.1 may be: MPSSHIM_DRIVER, else the usual driver directories.
 * Never this library, whatever its file is called. */
static void *open_real(char *path, size_t len)
{
    const char *env = chan_setting_text(CHAN_SET_DRIVER, NULL);
    static const char *const dirs[] = {
        "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu",  "/usr/lib64",      "/usr/lib",
        "/lib/x86_64-linux-gnu",   "/usr/lib/aarch64-linux-gnu", "/usr/lib/wsl/lib"};
    Dl_info self;
    char me[PATH_MAX] = "";
    if (dladdr((void *)shim_real, &self) && self.dli_fname)
        if (!realpath(self.dli_fname, me)) me[0] = '\0';
    for (int i = -1; i < (int)(sizeof(dirs) / sizeof(dirs[0])); i++) {
        if (i < 0 && !(env && *env)) continue;
        if (i < 0)
            snprintf(path, len, "%s", env);
        else
            snprintf(path, len, "%s/libcuda.so.1", dirs[i]);
        char real[PATH_MAX];
        if (!realpath(path, real) || (me[0] && strcmp(real, me) == 0)) continue;
        void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (h && dlsym(h, "cuInit")) return h;
        if (h) dlclose(h);
        if (i < 0) break; /* an explicit MPSSHIM_DRIVER that does not load: say so, no guessing */
    }
    return NULL;
}

/* The real driver loaded in this process without being initialised, for the hidden tables
 * that are computation in the caller's process (export_tables.c); NULL when none is found.
 * Opened once; the handle is never closed. */
static pthread_once_t real_driver_once = PTHREAD_ONCE_INIT;
static void *real_driver_handle; /* written once under real_driver_once */

static void real_driver_open(void)
{
    char path[PATH_MAX];
    real_driver_handle = open_real(path, sizeof(path));
}

void *shim_real_driver(void)
{
    pthread_once(&real_driver_once, real_driver_open);
    return real_driver_handle;
}

int shim_decide(void)
{
    int m = atomic_load(&shim_mode);
    if (m != SHIM_MODE_UNDECIDED) return m;
    CUresult r = shim_connect(); /* decides under the connection lock, once */
    (void)r;
    return atomic_load(&shim_mode);
}

/* Called by conn.c, under its lock, when no server can be had: picks REAL or NONE. */
void shim_fall_back(const char *why)
{
    char path[PATH_MAX];
    void *h = open_real(path, sizeof(path));
    if (!h) {
        shim_log("%s; no real CUDA driver found either: CUDA calls will fail", why);
        atomic_store(&shim_mode, SHIM_MODE_NONE);
        return;
    }
    for (int i = 0; i < SHIM_NCALLS; i++)
        real_fns[i] = dlsym(h, shim_calls[i].name);
    shim_log("%s; running directly on the CUDA driver %s, without sharing the GPU", why, path);
    atomic_store(&shim_mode, SHIM_MODE_REAL);
}
