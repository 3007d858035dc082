/* How many clients the server takes at once (MPSSHIM_MAX_CLIENTS), worked out at start from
 * what each client costs it, rather than MPS's fixed 48, which users hit.
 *
 * What one client costs (measured on the CPU test driver: bench/clients.sh, docs/operations.md):
 *   - descriptors: its socket; and while the client cap is full, as many newcomers again may
 *     be in their handshake (SRV_MAX_PENDING, client.c), each with its socket and, for a
 *     moment, its segment's memfd: SRV_FDS_PER_CLIENT in all;
 *   - its segment (chan_segment_size(), about 22 MiB), which the real driver page-locks
 *     whole (client.c register_segment): memory no other process can have;
 *   - that much of the address window (window.c), which pinned allocations share;
 *   - one thread (its worker; the real driver's own threads are per context, not per
 *     client), which counts against the user's RLIMIT_NPROC together with the clients' own.
 * Nothing else grows with clients: no table is sized by them, and an idle worker sleeps
 * (spin.c). The limit is the least of the bounds below; the one that decides is logged and
 * shown by get_server_status. */
#define _GNU_SOURCE
#include "server/core/capacity.h"
#include "server/core/server.h"
#include "server/core/window.h"
#include "channel/chan.h"
#include "channel/settings.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Per client: its socket, a newcomer's socket in its handshake, that one's segment memfd. */
#define SRV_FDS_PER_CLIENT 3u
/* Descriptors kept for everything else: the driver's (several per device), logs, control
 * connections, IPC and exported handles in flight. */
#define SRV_FDS_RESERVE 256u
/* Per client against RLIMIT_NPROC, the user's threads: its worker here, and the client
 * process's own main thread, the shim's helpers (MPSSHIM_COPY_THREADS) at a guess. */
#define SRV_THREADS_PER_CLIENT 4u
/* Segments page-locked may take at most 1/SRV_MEM_SHARE of the machine's memory: half, the
 * share MPSSHIM_MAX_PINNED_MB gives a client's page-locked memory by default (a client of
 * its own needs far more memory than its segment, so memory runs out in the clients first).
 * And at most 1/SRV_WINDOW_SHARE of the window: the rest is for pinned allocations. */
#define SRV_MEM_SHARE 2u
#define SRV_WINDOW_SHARE 4u

static char why[300];
static unsigned sustains; /* what the bounds allow */
static int worked_out;    /* MPSSHIM_MAX_CLIENTS unset (or bad): srv.max_clients is sustains */

/* Descriptors this process has open now. */
static unsigned fds_open(void)
{
    unsigned n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 16;
    while (readdir(d))
        n++;
    closedir(d);
    return n > 3 ? n - 3 : 0; /* ".", ".." and the directory's own */
}

/* The soft RLIMIT_NOFILE raised to the hard one (which an unprivileged process may do):
 * descriptors are what a few hundred clients first run out of under the usual soft 1024. */
static rlim_t raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
    if (r.rlim_cur < r.rlim_max) {
        rlim_t was = r.rlim_cur;
        r.rlim_cur = r.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &r) != 0) r.rlim_cur = was;
    }
    return r.rlim_cur;
}

unsigned long long srv_capacity_nofile(void)
{
    struct rlimit r;
    return getrlimit(RLIMIT_NOFILE, &r) == 0 ? (unsigned long long)r.rlim_cur : 0;
}

struct bound {
    const char *name;
    unsigned long long n;
    char how[160];
};

/* The least of the bounds, into why ("memory: ..."). */
static unsigned sustained(void)
{
    uint64_t seg = chan_segment_size(); /* page-locked whole; in the window, rounded up */
    uint64_t piece = (seg + SRV_WINDOW_ALIGN - 1) & ~(SRV_WINDOW_ALIGN - 1);
    struct bound b[4];
    int nb = 0;

    rlim_t nofile = raise_nofile();
    unsigned kept = fds_open() + SRV_FDS_RESERVE;
    unsigned long long all = nofile == RLIM_INFINITY ? 1ull << 30 : (unsigned long long)nofile;
    b[nb] = (struct bound){"descriptors", all > kept ? (all - kept) / SRV_FDS_PER_CLIENT : 0, ""};
    snprintf(b[nb++].how, sizeof(b[0].how), "%u each of RLIMIT_NOFILE %llu, %u kept",
             SRV_FDS_PER_CLIENT, all, kept);

    uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    b[nb] = (struct bound){"memory", mem / SRV_MEM_SHARE / seg, ""};
    snprintf(b[nb++].how, sizeof(b[0].how),
             "a %.1f MiB segment each, page-locked, in 1/%u of %llu MiB", seg / 1048576.0,
             SRV_MEM_SHARE, (unsigned long long)(mem >> 20));

    b[nb] = (struct bound){"address window", SRV_WINDOW_SIZE / SRV_WINDOW_SHARE / piece, ""};
    snprintf(b[nb++].how, sizeof(b[0].how), "%llu MiB each in 1/%u of %llu GiB",
             (unsigned long long)(piece >> 20), SRV_WINDOW_SHARE,
             (unsigned long long)(SRV_WINDOW_SIZE >> 30));

    struct rlimit r;
    if (getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
        b[nb] =
            (struct bound){"threads", (unsigned long long)r.rlim_cur / SRV_THREADS_PER_CLIENT, ""};
        snprintf(b[nb++].how, sizeof(b[0].how), "%u each of RLIMIT_NPROC %llu",
                 SRV_THREADS_PER_CLIENT, (unsigned long long)r.rlim_cur);
    }

    int least = 0;
    for (int i = 1; i < nb; i++)
        if (b[i].n < b[least].n) least = i;
    unsigned long long hi = chan_settings[CHAN_SET_MAX_CLIENTS].hi;
    snprintf(why, sizeof(why), "%s: %s", b[least].name, b[least].how);
    return (unsigned)(b[least].n < 1 ? 1 : b[least].n > hi ? hi : b[least].n);
}

void srv_capacity_init(void)
{
    sustains = sustained();
    unsigned long long v;
    if (chan_setting_get(CHAN_SET_MAX_CLIENTS, &v)) {
        srv.max_clients = (unsigned)v;
        return;
    }
    /* Unset (or bad: said, its origin kept): the worked-out number, in the status too. */
    srv.max_clients = sustains;
    worked_out = 1;
    char value[128], from[96], n[16];
    chan_setting_origin(CHAN_SET_MAX_CLIENTS, value, sizeof(value), from, sizeof(from));
    snprintf(n, sizeof(n), "%u", sustains);
    chan_setting_override(CHAN_SET_MAX_CLIENTS, n,
                          strcmp(from, "default") == 0 ? "default, worked out at start" : from);
}

void srv_capacity_log(void)
{
    /* An operator's number above the estimate is honoured: the bounds are shares picked to
     * be safe (a quarter of memory, of the window), not walls; what gives way past them is
     * said where it happens (a refused client's message, the accept loop's line). */
    if (srv.max_clients > sustains)
        srv_log("MPSSHIM_MAX_CLIENTS=%u is above the %u clients this server sustains (%s): "
                "honoured",
                srv.max_clients, sustains, why);
    else
        srv_log("Up to %u clients at once (MPSSHIM_MAX_CLIENTS%s; this server sustains %u, "
                "bounded by %s)",
                srv.max_clients, srv.max_clients == sustains ? ", worked out at start" : "",
                sustains, why);
}

const char *srv_capacity_note(void)
{
    return worked_out ? ", worked out at start from what this machine sustains; set it to change it"
                      : "";
}

void srv_capacity_no_fds(char *out, size_t len, int err)
{
    if (err == ENFILE)
        snprintf(out, len, "the machine has no descriptors left (its open-file table is full)");
    else
        snprintf(out, len, "the server has no descriptors left (RLIMIT_NOFILE %llu)",
                 srv_capacity_nofile());
}

void srv_capacity_describe(char *out, size_t len)
{
    snprintf(out, len, "Client limit %u (sustains %u, bounded by %s)\n", srv.max_clients, sustains,
             why);
}
