/* The server's settings from its environment, read once by main before any thread starts,
 * into srv: where its pipes and logs are, how it uses the driver, and what clients may hold;
 * and the environment the driver will see.
 * (Settings of one part stay with it: spin.c, waits.c and coalesce.c read their own, all
 * through the one reader, channel/settings.c.) */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/control/settings.h"
#include "server/core/capacity.h"
#include "server/limits/policy.h"
#include "channel/settings.h"
#include "channel/spawn.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* Bad values said before server.log is open: on stderr at once, and into the log once it
 * opens (srv_settings_log_open); after that, into the log (and stderr where it echoes). */
static char early[CHAN_SET_N][300]; /* each setting is said once at most */
static int nearly, log_open;

static void say_bad(const char *line)
{
    if (log_open) {
        srv_log("%s", line);
        return;
    }
    fprintf(stderr, "mpsshim-server: %s\n", line);
    if (nearly < (int)(sizeof(early) / sizeof(early[0])))
        snprintf(early[nearly++], sizeof(early[0]), "%s", line);
}

void srv_settings_log_open(void)
{
    log_open = 1;
    for (int i = 0; i < nearly; i++)
        srv_log("%s", early[i]);
    srv_capacity_log();
}

void srv_settings_paths(void)
{
    chan_settings_reporter(say_bad);
    snprintf(srv.pipe_dir, sizeof(srv.pipe_dir), "%s", chan_pipe_dir());
    char buf[256];
    snprintf(srv.log_dir, sizeof(srv.log_dir), "%s", chan_log_dir(buf, sizeof(buf)));
    const char *v;
    if (*srv.driver_path)
        chan_setting_override(CHAN_SET_DRIVER, srv.driver_path, "--driver");
    else if ((v = chan_setting_text(CHAN_SET_DRIVER, NULL)))
        snprintf(srv.driver_path, sizeof(srv.driver_path), "%s", v);
    srv.idle_spin_ns = chan_setting_num(CHAN_SET_SERVER_SPIN_US) * 1000;
}

void srv_settings_driver(int *pool_asked)
{
    srv.block_sync = (int)chan_setting_num(CHAN_SET_BLOCKING_SYNC);
    static const int sched[] = {CU_CTX_SCHED_AUTO, CU_CTX_SCHED_SPIN, CU_CTX_SCHED_YIELD,
                                CU_CTX_SCHED_BLOCKING_SYNC};
    srv.ctx_sched = sched[chan_setting_choice(CHAN_SET_CTX_SCHED)];
    srv.green_each = (int)chan_setting_num(CHAN_SET_GREEN_EACH);
    /* cuMemAlloc from the arena unless MPSSHIM_DEVICE_VMM=0 (devmem.c says why); the pool
     * only when asked for with the arena off. */
    srv.device_vmm = (int)chan_setting_num(CHAN_SET_DEVICE_VMM);
    *pool_asked = (int)chan_setting_num(CHAN_SET_DEVICE_POOL);
    srv.device_pool = !srv.device_vmm && *pool_asked;
    srv.quiet_context = (int)chan_setting_num(CHAN_SET_QUIET_CONTEXT);
    srv.keep_libraries = (int)chan_setting_num(CHAN_SET_KEEP_LIBRARIES);
}

void srv_settings_limits(void)
{
    /* Half the machine's memory by default; MPSSHIM_MAX_PINNED_MB sets another cap. */
    unsigned long long mb;
    srv.max_pinned = chan_setting_get(CHAN_SET_MAX_PINNED_MB, &mb)
                         ? mb << 20
                         : (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2;
    /* A departed client's work that is still running after this long (a kernel that never
     * ends, a stream waiting on memory it freed) is left to run, and what it held is left
     * allocated rather than freed under it: the release, terminate_client and quit go on. */
    srv.release_ns = chan_setting_num(CHAN_SET_RELEASE_TIMEOUT) * 1000000000ull;
    /* Bytes a client's queued work may hold in the server before its requests wait for the
     * GPU (queue.c); 0: no limit. */
    srv.queue_limit = chan_setting_num(CHAN_SET_QUEUE_LIMIT);
    /* Registry records one client process may hold (account.c): each costs the server a few
     * hundred bytes, and a client making a million events took it from 4 to 374 MB. */
    srv.max_objects = chan_setting_num(CHAN_SET_MAX_OBJECTS);
    /* Kernels of a client's images whose code is loaded when it loads them (module.c). */
    srv.eager_kernels = (unsigned)chan_setting_num(CHAN_SET_EAGER_KERNELS);
    srv_capacity_init(); /* srv.max_clients (capacity.c) */
    /* The rest are read where they are used, some late (a trace's end): said now. */
    chan_settings_check("server");
}

/* A server on top of native MPS would be an MPS client, which it must not be unless
 * asked. */
static void clear_mps_env(void)
{
    if (chan_setting_num(CHAN_SET_ON_MPS)) return;
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

uint64_t srv_settings_seconds_ns(enum chan_setting_id id)
{
    return chan_setting_num(id) * 1000000000ull;
}

void srv_settings_describe(char *out, size_t len)
{
    size_t n = 0;
    *out = '\0';
    for (int i = 0; i < CHAN_SET_N && n < len; i++) {
        if (strcmp(chan_settings[i].side, "client") == 0) continue;
        char value[128], from[96];
        chan_setting_origin((enum chan_setting_id)i, value, sizeof(value), from, sizeof(from));
        int k =
            snprintf(out + n, len - n, "Setting %s=%s (%s)\n", chan_settings[i].name, value, from);
        if (k < 0) break;
        n += (size_t)k;
    }
}

int srv_settings_print(FILE *f)
{
    int rc = 0;
    static const char *const kind[] = {[CHAN_SET_BOOL] = "boolean",
                                       [CHAN_SET_COUNT] = "number",
                                       [CHAN_SET_SECONDS] = "seconds",
                                       [CHAN_SET_US] = "microseconds",
                                       [CHAN_SET_MB] = "MiB",
                                       [CHAN_SET_SIZE] = "size",
                                       [CHAN_SET_CHOICE] = "choice",
                                       [CHAN_SET_PATH] = "path",
                                       [CHAN_SET_DEVICE_SIZES] = "device sizes"};
    for (int i = 0; i < CHAN_SET_N; i++) {
        const struct chan_setting *s = &chan_settings[i];
        char acc[128];
        chan_setting_accepts((enum chan_setting_id)i, acc, sizeof(acc));
        fprintf(f, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s->name, s->mps ? s->mps : "-", s->side,
                kind[s->kind], acc, s->dflt,
                s->on_bad == CHAN_BAD_REFUSE ? "client refused" : "default used", s->doc);
        if (!chan_setting_default_ok((enum chan_setting_id)i)) {
            fprintf(stderr, "channel/settings.def: %s's default, %s, is not a value it takes\n",
                    s->name, s->dflt);
            rc = 1;
        }
    }
    return rc;
}
