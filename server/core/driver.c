/* Loading the real driver and resolving its functions; see driver.h. */
#define _GNU_SOURCE
#include "server/core/driver.h"
#include "server/core/server.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void *srv_drv_fns[SHIM_NCALLS];
void *srv_drv_handle;

CUresult srv_drv_missing(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

int srv_drv_load(const char *path, char *resolved, size_t len)
{
    /* RTLD_LOCAL keeps the driver's symbols out of the global scope. */
    void *h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(resolved, len, "%s", dlerror());
        return -1;
    }
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        snprintf(resolved, len, "%s", lm->l_name);
    else
        snprintf(resolved, len, "%s", path ? path : "libcuda.so.1");
    /* Never itself: a libcuda.so.1 that is really the shim (a symlink on the search path)
     * would have the server call its own clients' entry points. */
    char real[4096];
    if (realpath(resolved, real) && strstr(real, "libmpsshim")) {
        snprintf(resolved, len,
                 "%s is the mpsshim client library, not a CUDA driver: set "
                 "MPSSHIM_DRIVER to the real libcuda.so.1",
                 real);
        dlclose(h);
        return -1;
    }
    for (int i = 0; i < SHIM_NCALLS; i++)
        srv_drv_fns[i] = dlsym(h, shim_calls[i].name);
    if (!srv_drv_fns[SHIM_ID_cuInit]) {
        snprintf(resolved, len, "%s exports no cuInit: not a CUDA driver", path);
        return -1;
    }
    srv_drv_handle = h;
    return 0;
}

const char *srv_errname(CUresult r)
{
    const char *n = shim_error_name(r);
    return n ? n : "CUDA_ERROR_?";
}
