/* Client-side messages: one line each on stderr; unsupported calls reported once. */
#include "interpose/shim.h"
#include "channel/settings.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void shim_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    /* One write per line so lines of concurrent threads do not interleave. */
    fprintf(stderr, "mpsshim: %s\n", line);
}

static void say_setting(const char *line)
{
    shim_log("%s", line);
}

/* A bad setting's value is said as every client message is (settings.c reads them). */
__attribute__((constructor)) static void settings_to_log(void)
{
    chan_settings_reporter(say_setting);
}

/* One flag per call id, set by the first report. */
static _Atomic unsigned char reported[SHIM_NCALLS];

CUresult shim_unsupported(int id)
{
    if (id >= 0 && id < SHIM_NCALLS && !atomic_exchange(&reported[id], 1))
        shim_log("%s is not supported: returning CUDA_ERROR_NOT_SUPPORTED", shim_calls[id].name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Distinct features refused, each reported once (a short list: string compare is fine). */
static pthread_mutex_t refused_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *refused[64];
static unsigned nrefused;

CUresult shim_refuse_as(const char *what, CUresult err)
{
    int first = 1;
    pthread_mutex_lock(&refused_lock);
    for (unsigned i = 0; i < nrefused; i++)
        if (refused[i] == what || strcmp(refused[i], what) == 0) first = 0;
    if (first && nrefused < sizeof(refused) / sizeof(refused[0])) refused[nrefused++] = what;
    pthread_mutex_unlock(&refused_lock);
    if (first) shim_log("%s is not supported: returning %s", what, shim_error_name(err));
    return err;
}

CUresult shim_refuse(const char *what)
{
    return shim_refuse_as(what, CUDA_ERROR_NOT_SUPPORTED);
}
