/* Loading CUPTI for the server's traces (server/control/trace.c): dlopen at the first `trace start`
 * only, from MPSSHIM_CUPTI, else the toolkit's usual places, else the loader's search, and
 * every function of SRV_CUPTI_FUNCTIONS resolved. Once loaded it stays (CUPTI cannot be
 * unloaded safely). */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/control/trace_cupti.h"
#include "channel/settings.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_cupti_lib srv_cupti;

/* Where CUPTI is looked for when MPSSHIM_CUPTI is not set. */
static const char *const cupti_places[] = {
    "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
    "/usr/local/cuda/lib64/libcupti.so",
    "/usr/local/cuda/lib/libcupti.so",
    "libcupti.so",
    "libcupti.so.13",
    "libcupti.so.12",
};

const char *srv_cupti_error(srv_cupti_result r)
{
    static __thread char num[32];
    const char *s = NULL;
    if (srv_cupti.result_string && srv_cupti.result_string(r, &s) == SRV_CUPTI_SUCCESS && s)
        return s;
    snprintf(num, sizeof(num), "CUPTI error %d", r);
    return num;
}

/* Resolves every function of h; 0, or -1 with the first one missing in why. */
static int cupti_resolve(void *h, char *why, size_t len)
{
#define X(name, ret, args)                                                                         \
    if (!(srv_cupti.name = (ret(*) args)dlsym(h, #name))) {                                        \
        snprintf(why, len, "it has no %s", #name);                                                 \
        return -1;                                                                                 \
    }
    SRV_CUPTI_FUNCTIONS(X)
#undef X
    srv_cupti.result_string =
        (srv_cupti_result(*)(srv_cupti_result, const char **))dlsym(h, "cuptiGetResultString");
    srv_cupti.finalize = (srv_cupti_result(*)(void))dlsym(h, "cuptiFinalize");
    return 0;
}

int srv_cupti_load(char *why, size_t len)
{
    if (srv_cupti.handle) return 0;
    const char *want = chan_setting_text(CHAN_SET_CUPTI, NULL);
    const char *const *places = cupti_places;
    size_t n = sizeof(cupti_places) / sizeof(cupti_places[0]);
    if (want && *want) {
        places = &want;
        n = 1;
    }
    char tried[1024] = "", err[300] = "";
    for (size_t i = 0; i < n; i++) {
        void *h = dlopen(places[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            size_t t = strlen(tried);
            snprintf(tried + t, sizeof(tried) - t, "%s%s", t ? ", " : "", places[i]);
            const char *e = dlerror();
            if (!*err && e) snprintf(err, sizeof(err), "%s", e);
            continue;
        }
        char bad[128];
        if (cupti_resolve(h, bad, sizeof(bad)) != 0) {
            snprintf(why, len, "%s is no CUPTI library: %s", places[i], bad);
            dlclose(h);
            return -1;
        }
        srv_cupti.handle = h;
        snprintf(srv_cupti.path, sizeof(srv_cupti.path), "%s", places[i]);
        srv_log("Trace: loaded CUPTI from %s", places[i]);
        return 0;
    }
    if (want && *want)
        snprintf(why, len, "CUPTI could not be loaded from MPSSHIM_CUPTI=%s: %s", want, err);
    else
        snprintf(why, len,
                 "CUPTI was not found (tried %s); set MPSSHIM_CUPTI to the path of libcupti.so "
                 "(the CUDA toolkit's extras/CUPTI/lib64, or pip's nvidia-cuda-cupti) when "
                 "starting the server",
                 tried);
    return -1;
}
