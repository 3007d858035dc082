/* The server's settings from its environment, read once by main before any thread starts,
 * into srv: where its pipes and logs are, how it uses the driver, and what clients may hold;
 * and the environment the driver will see.
 * (Settings of one part stay with it: spin.c, waits.c and coalesce.c read their own.) */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/control/settings.h"
#include "server/limits/policy.h"
#include "channel/spawn.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

void srv_settings_paths(void)
{
    snprintf(srv.pipe_dir, sizeof(srv.pipe_dir), "%s", chan_pipe_dir());
    char buf[256];
    snprintf(srv.log_dir, sizeof(srv.log_dir), "%s", chan_log_dir(buf, sizeof(buf)));
    const char *v;
    if (!*srv.driver_path && (v = getenv("MPSSHIM_DRIVER")))
        snprintf(srv.driver_path, sizeof(srv.driver_path), "%s", v);
    v = getenv("MPSSHIM_SERVER_SPIN_US");
    srv.idle_spin_ns = (v ? strtoull(v, NULL, 10) : 100) * 1000;
}

void srv_settings_driver(int *pool_asked, const char **ctx_sched_bad)
{
    const char *v = getenv("MPSSHIM_BLOCKING_SYNC");
    srv.block_sync = v ? atoi(v) != 0 : 1;
    v = getenv("MPSSHIM_CTX_SCHED");
    srv.ctx_sched = !v || !*v || !strcmp(v, "auto") ? CU_CTX_SCHED_AUTO
                    : !strcmp(v, "spin")            ? CU_CTX_SCHED_SPIN
                    : !strcmp(v, "yield")           ? CU_CTX_SCHED_YIELD
                    : !strcmp(v, "blocking")        ? CU_CTX_SCHED_BLOCKING_SYNC
                                                    : (*ctx_sched_bad = v, CU_CTX_SCHED_AUTO);
    v = getenv("MPSSHIM_GREEN_EACH");
    srv.green_each = v && atoi(v) != 0;
    /* cuMemAlloc from the arena unless MPSSHIM_DEVICE_VMM=0 (devmem.c says why); the pool
     * only when asked for with the arena off. */
    v = getenv("MPSSHIM_DEVICE_VMM");
    srv.device_vmm = !v || !*v || atoi(v) != 0;
    v = getenv("MPSSHIM_DEVICE_POOL");
    *pool_asked = v && atoi(v) != 0;
    srv.device_pool = !srv.device_vmm && *pool_asked;
}

/* A count from the environment variable `name`: dflt when it is unset or empty, and when it
 * is not a count up to max (said on stderr: the log is not open yet). */
static unsigned long long env_count(const char *name, unsigned long long dflt,
                                    unsigned long long max)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (!*end && *v != '-' && n <= max) return n;
    fprintf(stderr, "mpsshim-server: %s=%s is not a count; using %llu\n", name, v, dflt);
    return dflt;
}

void srv_settings_limits(void)
{
    /* Half the machine's memory by default; MPSSHIM_MAX_PINNED_MB sets another cap. */
    const char *v = getenv("MPSSHIM_MAX_PINNED_MB");
    srv.max_pinned = v ? strtoull(v, NULL, 10) << 20
                       : (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2;
    /* A departed client's work that is still running after this long (a kernel that never
     * ends, a stream waiting on memory it freed) is left to run, and what it held is left
     * allocated rather than freed under it: the release, terminate_client and quit go on. */
    v = getenv("MPSSHIM_RELEASE_TIMEOUT");
    srv.release_ns = (v ? strtoull(v, NULL, 10) : 30) * 1000000000ull;
    /* Bytes a client's queued work may hold in the server before its requests wait for the
     * GPU (queue.c); 0: no limit. */
    v = getenv("MPSSHIM_QUEUE_LIMIT");
    srv.queue_limit = 64ull << 20;
    if (v && srv_parse_size(v, &srv.queue_limit) != 0) {
        fprintf(stderr,
                "mpsshim-server: MPSSHIM_QUEUE_LIMIT=%s is not a size (e.g. 64M); "
                "using 64M\n",
                v);
        srv.queue_limit = 64ull << 20;
    }
    /* Registry records one client process may hold (account.c): each costs the server a few
     * hundred bytes, and a client making a million events took it from 4 to 374 MB. */
    srv.max_objects = env_count("MPSSHIM_MAX_OBJECTS", 262144, ULLONG_MAX);
    /* Kernels of a client's images whose code is loaded when it loads them (module.c). */
    srv.eager_kernels = (unsigned)env_count("MPSSHIM_EAGER_KERNELS", 256, 1000000);
    v = getenv("MPSSHIM_MAX_CLIENTS");
    srv.max_clients = v ? (unsigned)strtoul(v, NULL, 10) : 48;
}

/* A server on top of native MPS would be an MPS client, which it must not be unless
 * asked. */
static void clear_mps_env(void)
{
    if (getenv("MPSSHIM_ON_MPS")) return;
    for (;;) {
        int found = 0;
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "CUDA_MPS_", 9) == 0) {
                char name[128];
                size_t n = strcspn(*e, "=");
                if (n >= sizeof(name)) n = sizeof(name) - 1;
                memcpy(name, *e, n);
                name[n] = '\0';
                unsetenv(name);
                found = 1;
                break;
            }
        if (!found) return;
    }
}

void srv_settings_driver_env(void)
{
    /* The directories MPS's variables named stay named, in ours: the standby and a fresh
     * image (handover.c, recycle.c) read them again from the environment. */
    setenv("MPSSHIM_PIPE_DIRECTORY", srv.pipe_dir, 1);
    setenv("MPSSHIM_LOG_DIRECTORY", srv.log_dir, 1);
    clear_mps_env();
    /* One context carries every client's streams. With the driver's default of 8 hardware
     * work queues, streams beyond 8 share queues and serialise, and clients that overlap under
     * MPS run one after another. 32 queues keep 32 overlapping processes at MPS's pace, where
     * 16 do not, and make a launch + synchronize and a small read a little dearer (stream
     * queries, answered in the client when idle, no longer pay): bench/NOTES.md, "Hardware work
     * queues". No setting gives both; overlap is what this server is for. 32 is the driver's
     * most. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

uint64_t srv_settings_seconds_ns(const char *name, unsigned dflt, unsigned long long max)
{
    const char *v = getenv(name);
    unsigned long long s = dflt;
    if (v && *v) {
        char *end;
        errno = 0;
        s = strtoull(v, &end, 10);
        if (*v == '-' || errno || *end || s > max) {
            srv_log("%s=%s is not a number of seconds (0 to %llu): %u is used", name, v, max, dflt);
            s = dflt;
        }
    }
    return s * 1000000000ull;
}
