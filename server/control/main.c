/* mpsshim-server: one per user and pipe directory. Loads the real driver, takes one
 * context per device, and serves clients on $PIPE_DIR/mpsshim.sock and commands on
 * $PIPE_DIR/control.sock until told to quit. Normally started by `mpsshim-control -d`. */
#define _GNU_SOURCE
#include "server/core/clientspace.h"
#include "server/core/server.h"
#include "server/control/siblings.h"
#include "server/memory/memops.h"
#include "server/core/log.h"
#include "server/core/waits.h"
#include "server/core/clients.h"
#include "server/core/registry.h"
#include "server/memory/arena.h"
#include "server/core/coalesce.h"
#include "server/code/codegate.h"
#include "server/core/context.h"
#include "server/control/control.h"
#include "server/core/devices.h"
#include "server/core/devctx.h"
#include "server/core/fault.h"
#include "server/core/generic.h"
#include "server/limits/green.h"
#include "server/handover/handover.h"
#include "server/core/window.h"
#include "server/limits/policy.h"
#include "server/memory/pools.h"
#include "server/memory/quietctx.h"
#include "server/code/procaddr.h"
#include "server/code/seqgraph.h"
#include "server/code/unloads.h"
#include "server/handover/recycle.h"
#include "server/core/spin.h"
#include "server/control/settings.h"
#include "server/control/admit.h"
#include "channel/spawn.h"
#include "channel/version.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct srv srv = {.clients_lock = PTHREAD_MUTEX_INITIALIZER};

/* The server must never be its own client: a server started under LD_PRELOAD=libmpsshim.so
 * (inherited from an `mpirun -x` line, say) runs itself again without it. */
static void drop_shim_preload(char **argv)
{
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "libmpsshim")) return;
    char kept[4096] = "";
    char *copy = strdup(pre);
    if (!copy) return;
    for (char *save = NULL, *tok = strtok_r(copy, ": ", &save); tok;
         tok = strtok_r(NULL, ": ", &save)) {
        if (strstr(tok, "libmpsshim")) continue;
        if (*kept) strncat(kept, ":", sizeof(kept) - strlen(kept) - 1);
        strncat(kept, tok, sizeof(kept) - strlen(kept) - 1);
    }
    free(copy);
    if (*kept)
        setenv("LD_PRELOAD", kept, 1);
    else
        unsetenv("LD_PRELOAD");
    execv("/proc/self/exe", argv);
    fprintf(stderr, "mpsshim-server: cannot restart without the shim: %s\n", strerror(errno));
    exit(1);
}

static int listen_on(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", srv.pipe_dir, name) >=
        sizeof(sa.sun_path))
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return -1;
    unlink(sa.sun_path); /* stale: we hold the directory's lock */
    mode_t old = umask(0077);
    int ok = bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(s, 256) == 0;
    umask(old);
    if (!ok) {
        close(s);
        return -1;
    }
    return s;
}

/* Tells whoever started us (mpsshim-control -d: MPSSHIM_READY_FD) that we serve, or why not. */
static void tell_starter(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tell_starter(const char *fmt, ...)
{
    const char *v = getenv("MPSSHIM_READY_FD");
    if (!v) return;
    int fd = atoi(v);
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (write(fd, msg, strlen(msg)) < 0) {
        /* the starter is gone: nothing to tell */
    }
    close(fd);
    unsetenv("MPSSHIM_READY_FD");
}

static void on_signal(int sig)
{
    atomic_store(&srv.quitting, 1);
    srv_recycle_forward(sig);
}

/* SIGHUP: the main loop reopens the logs (log rotation); a handler may not take locks. */
static _Atomic int reopen_logs;
static void on_hangup(int sig)
{
    (void)sig;
    atomic_store(&reopen_logs, 1);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mpsshim-server [--driver PATH] [--log-stderr] [--require-logs]\n"
               "       mpsshim-server --version | --settings | --help\n"
               "  Serves CUDA clients that run with LD_PRELOAD=libmpsshim.so.\n"
               "  Start it with `mpsshim-control -d` (or -f) rather than directly.\n"
               "  --driver PATH    the real CUDA driver (else MPSSHIM_DRIVER, else libcuda.so.1)\n"
               "  --log-stderr     every log line on stderr too (mpsshim-control -f)\n"
               "  --require-logs   refuse to start when the log files cannot be opened\n"
               "                   (mpsshim-control -d)\n"
               "  --settings       every setting of server and clients, one a line: name, MPS's\n"
               "                   name, who reads it, kind, what it accepts, default, a bad\n"
               "                   value's fate, what it does (tab-separated; docs/settings.md)\n"
               "  SIGHUP reopens the log files (after log rotation); SIGTERM and SIGINT stop it.\n"
               "environment: MPSSHIM_PIPE_DIRECTORY (CUDA_MPS_PIPE_DIRECTORY), "
               "MPSSHIM_LOG_DIRECTORY (CUDA_MPS_LOG_DIRECTORY), MPSSHIM_DRIVER\n");
}

/* Logs why the server cannot start and tells the starter the same. */
#define START_FAILED(...)                                                                          \
    do {                                                                                           \
        char why_[800];                                                                            \
        snprintf(why_, sizeof(why_), __VA_ARGS__);                                                 \
        srv_log("MPS server failed to start: %s", why_);                                           \
        tell_starter("%s\n", why_);                                                                \
        return -1;                                                                                 \
    } while (0)

/* The start-up's steps done so far: a standby (handover.c) takes some before a fault. */
static int driver_loaded, devices_made;
static int first_use; /* the devices' contexts are made at first use (devctx.c) */

/* The driver loaded and initialised. */
static int load_driver(void)
{
    if (driver_loaded) return 0;
    char resolved[512];
    if (srv_drv_load(srv.driver_path, resolved, sizeof(resolved)) != 0)
        START_FAILED("cannot load the CUDA driver: %s", resolved);
    srv_log("Using CUDA driver %s", resolved);
    srv_spin_log_settings();
    srv_clientspace_log();
    srv_procaddr_build(srv_drv_handle); /* before cuInit: cudart asks before it too */
    CUresult r = DRV(cuInit)(0);
    if (r != CUDA_SUCCESS) START_FAILED("cuInit returned %s", srv_errname(r));
    driver_loaded = 1;
    return 0;
}

/* Whether this is a pipe directory's own server of several devices whose clients may move
 * to their GPUs' servers: MPSSHIM_SERVER_PER_GPU and MPSSHIM_SERVER_PER_GPU_MOVE not 0 in
 * its environment (both "auto" by default; a client that starts it passes its own on), and
 * its devices numbered as the machine's: no CUDA_VISIBLE_DEVICES of its own. Why the last: a
 * client names its GPU's folder and server by its ordinal or its own CUDA_VISIBLE_DEVICES
 * entry, which the server started there applies to the machine's GPUs; under a server
 * started with "2,3", as a Slurm prolog starts a job's, clients would start servers of GPUs 0
 * and 1, which are not the job's (they would find the GPU differs and stay, and the servers
 * would be left on GPUs not theirs). A server started by a client never has one. Asked once,
 * at the devices' start. */
static int clients_may_move(void)
{
    char top[PATH_MAX];
    if (srv.ndev < 2 || !chan_setting_num(CHAN_SET_SERVER_PER_GPU) ||
        !chan_setting_num(CHAN_SET_SERVER_PER_GPU_MOVE) || srv_siblings_top(top, sizeof(top)))
        return 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd)
        srv_log("Clients stay with this server of %d GPUs: CUDA_VISIBLE_DEVICES=%.64s in its "
                "environment numbers its devices otherwise than the machine, so they cannot "
                "name their GPUs' own servers; a fault on one GPU ends every client "
                "(MPSSHIM_SERVER_PER_GPU)",
                srv.ndev, cvd);
    return !cvd;
}

/* Whether the devices' contexts wait for their first use (devctx.c says why):
 * MPSSHIM_SERVER_CONTEXTS, whose "auto" is first-use where clients may move (may_move:
 * clients_may_move's answer), else at start. */
static int contexts_at_first_use(int may_move)
{
    int choice = chan_setting_choice(CHAN_SET_SERVER_CONTEXTS);
    if (choice == 1) return 0; /* start */
    if (choice == 2) return 1; /* first-use */
    return may_move;
}

/* One shared context per device (devctx.c), and what the server keeps in each; the server's
 * tables. */
static int init_devices(void)
{
    if (devices_made) return 0;
    if (load_driver() != 0) return -1;
    CUresult r;
    if (srv_devinfo_fill(&srv.devinfo) != 0 || srv.devinfo.ndev == 0)
        START_FAILED("no CUDA device");
    srv.ndev = srv.devinfo.ndev;
    for (int i = 0; i < srv.ndev; i++) {
        CUdevice dev;
        DRV(cuDeviceGet)(&dev, i);
        /* How the driver waits for the GPU in a synchronising call of a worker: its own
         * choice (spin while threads are fewer than CPUs) unless MPSSHIM_CTX_SCHED names
         * one, so that a bench run can compare them (bench/run.sh --variant). */
        if (srv.ctx_sched &&
            (r = DRV(cuDevicePrimaryCtxSetFlags_v2)(dev, srv.ctx_sched)) != CUDA_SUCCESS)
            srv_log("device %d: MPSSHIM_CTX_SCHED not taken: %s", i, srv_errname(r));
    }
    char why[200];
    int may_move = clients_may_move();
    first_use = contexts_at_first_use(may_move);
    /* Clients are told to move (CHAN_WELCOME_MOVES) only by a server that made no context
     * yet: moving away from one that holds their GPU's would leave two on it. */
    int move = first_use && may_move;
    if (srv_devctx_start(first_use, move, why, sizeof(why)) != 0) START_FAILED("%s", why);
    srv_green_init();
    if (srv_window_init() != 0 || srv_generic_init() != 0 || srv_registry_init() != 0)
        START_FAILED("cannot set up the server's tables");
    devices_made = 1;
    return 0;
}

/* A standby, before it is told to take over (handover.c): as far as MPSSHIM_STANDBY says.
 * 0, or -1 (logged, and said to its server). */
static int prepare_standby(void)
{
    int m = srv_standby_mode();
    if (m == SRV_STANDBY_CONTEXT) return init_devices();
    if (m == SRV_STANDBY_INIT) return load_driver();
    return 0;
}

/* What main's steps share: the command line's choices, and the service's sockets and lock
 * (made here, or adopted from a faulted server or from the image this one was). */
struct start {
    int log_stderr, require_logs;
    int pool_asked; /* MPSSHIM_DEVICE_POOL=1, said once the log is open if not taken */
    int standby, foreground, successor, afresh, adopted;
    int lfd, cfd, lockfd;
    uint64_t started_ns;
    char why[1024];
    char ready[600]; /* server.pid's path */
};

/* A step's answer when start-up goes on; any other is main's exit status. */
#define GO_ON (-1)

/* The command line: GO_ON, or the exit status of --version, --help or a bad option. */
static int read_args(int argc, char **argv, struct start *st)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--driver") == 0 && i + 1 < argc) {
            snprintf(srv.driver_path, sizeof(srv.driver_path), "%s", argv[++i]);
        } else if (strcmp(argv[i], "--log-stderr") == 0) {
            st->log_stderr = 1;
        } else if (strcmp(argv[i], "--require-logs") == 0) {
            st->require_logs = 1;
        } else if (strcmp(argv[i], "--version") == 0) {
            chan_print_version("mpsshim-server");
            return 0;
        } else if (strcmp(argv[i], "--settings") == 0) {
            return srv_settings_print(stdout);
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    return GO_ON;
}

/* Whether this process is a standby for a server's next fault (handover.c), which serves
 * nothing until told; and the environment the driver will see. GO_ON or the exit status. */
static int prepare_process(struct start *st)
{
    st->started_ns = chan_now_ns();
    st->standby = srv_standby_adopt(st->why, sizeof(st->why));
    if (st->standby == 2) return 0; /* its server is already gone */
    if (st->standby < 0) {
        fprintf(stderr, "mpsshim-server: %s\n", st->why);
        return 1;
    }
    if (!st->standby)
        prctl(PR_SET_NAME, "mpsshim-server"); /* not "exe": a fresh image runs /proc/self/exe */
    /* Started by nobody who waits for "ready" (systemd, a container, a shell): the pid the
     * caller knows must outlive a fault (handover.c). */
    st->foreground = getenv("MPSSHIM_READY_FD") == NULL;
    srv_settings_driver_env();
    srv_policy_init();
    return GO_ON;
}

/* The pipe directory (private to this user) and the log directory. GO_ON or 1. */
static int make_dirs(struct start *st)
{
    if (chan_make_dirs(srv.pipe_dir) != 0) {
        fprintf(stderr, "mpsshim-server: cannot create %s: %s\n", srv.pipe_dir, strerror(errno));
        tell_starter("cannot create the pipe directory %s: %s\n", srv.pipe_dir, strerror(errno));
        return 1;
    }
    if (chan_dir_private(srv.pipe_dir, st->why, sizeof(st->why)) != 0) {
        fprintf(stderr, "mpsshim-server: refusing the pipe directory: %s\n", st->why);
        tell_starter("refusing the pipe directory: %s\n", st->why);
        return 1;
    }
    chan_make_dirs(srv.log_dir);
    return GO_ON;
}

/* A standby gets ready, then waits until a fault lost a device to its server, whose
 * sockets and lock it then takes (handover.c). It opens no log before: the logs are
 * the servers' (control.log counts their starts and exits), and its server logs what it
 * says, failures included. GO_ON, or the exit status of a standby not needed. */
static int wait_as_standby(struct start *st)
{
    if (!st->standby) return GO_ON;
    if (prepare_standby() != 0) return 1;
    unsigned ms = (unsigned)((chan_now_ns() - st->started_ns) / 1000000);
    st->successor = srv_standby_wait(ms, &st->lfd, &st->cfd, &st->lockfd, st->why, sizeof(st->why));
    if (st->successor == 2) return 0; /* not needed: its server quit, or started afresh */
    return GO_ON;
}

/* server.log. GO_ON, or 1 when the logs are required and cannot be opened. */
static int open_logs(struct start *st)
{
    if (srv_log_open(srv.log_dir, "server.log", "Server", st->log_stderr, st->why,
                     sizeof(st->why)) != 0) {
        /* mpsshim-control -d: a daemon whose logs go nowhere is refused, loudly. Started in
         * the foreground, its lines still reach stderr; started by a client, the client's
         * program must run: both go on (open_one said why on stderr). So does a server
         * starting afresh (recycle.c): its first start had its logs, and its service runs. */
        if (st->require_logs && !getenv("MPSSHIM_RECYCLE")) {
            fprintf(stderr, "mpsshim-server: %s\n", st->why);
            tell_starter("%s (MPSSHIM_LOG_DIRECTORY sets another directory)\n", st->why);
            return 1;
        }
    } else {
        srv_settings_log_open();
    }
    return GO_ON;
}

/* The lock taken: at once, or once a server that is going has gone. A quitting server
 * unlinks its sockets first and holds the lock until its process is gone, which on two
 * H200s outlasted quit's wait for its pid: `quit` then `-d` at once found the lock held and
 * refused (the GPU tier's server-restart row; quit now waits for the lock too, ctl.c, but
 * a script may stop a server otherwise). A holder without its service socket is quitting,
 * or still starting (the socket comes after its devices): waited for, at most LOCK_WAIT_MS,
 * and a socket that appears meanwhile means a server runs. 1 when taken. */
#define LOCK_WAIT_MS 10000
static int lock_after_quit(int fd)
{
    char sock[600];
    snprintf(sock, sizeof(sock), "%s/%s", srv.pipe_dir, CHAN_SOCKET_NAME);
    for (int ms = 0;; ms += 20) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 1;
        if (errno != EWOULDBLOCK || ms >= LOCK_WAIT_MS || access(sock, F_OK) == 0) return 0;
        usleep(20 * 1000);
    }
}

/* The service's sockets and lock adopted, or the lock taken. GO_ON or 1. */
static int take_lock(struct start *st)
{
    /* ... and one that started afresh when idle (recycle.c), those of the image it was. */
    st->afresh = st->successor ? 0
                               : srv_recycle_adopt(&st->lfd, &st->cfd, &st->lockfd, &st->foreground,
                                                   st->why, sizeof(st->why));
    if (st->successor < 0 || st->afresh < 0) {
        srv_log("MPS server failed to start: %s", st->why);
        tell_starter("%s\n", st->why);
        return 1;
    }
    st->adopted = st->successor || st->afresh;
    /* One server per pipe directory: the lock is held for the server's whole life. */
    char lock[600];
    snprintf(lock, sizeof(lock), "%s/server.lock", srv.pipe_dir);
    if (!st->adopted) st->lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (st->lockfd < 0 || (!st->adopted && !lock_after_quit(st->lockfd))) {
        fprintf(stderr, "mpsshim-server: a server already runs in %s\n", srv.pipe_dir);
        tell_starter("a server already runs in %s\n", srv.pipe_dir);
        return 1;
    }
    return GO_ON;
}

/* The signals' handlers, and the foreground server as its successors' reaper. */
static void take_signals(int foreground)
{
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct sigaction hup = {.sa_handler = on_hangup};
    sigaction(SIGHUP, &hup, NULL);
    /* An image started afresh inherits them blocked, with any that came during the
     * replacement pending: delivered now, to these handlers. */
    srv_recycle_unblock();

    srv_handover_signals();
    /* The foreground server's pid is the service's: the servers after a fault, and the
     * standby, stay below it rather than going to init (handover.c). */
    if (foreground) prctl(PR_SET_CHILD_SUBREAPER, 1);
}

/* The devices, the fault and coalescing threads, and the listening sockets. GO_ON or 1. */
static int start_service(struct start *st)
{
    if (init_devices() != 0) {
        fprintf(stderr, "mpsshim-server: failed to start; see %s/server.log\n", srv.log_dir);
        tell_starter("failed to start; see %s/server.log\n", srv.log_dir);
        return 1;
    }
    if (srv_fault_start() != 0) {
        srv_log("MPS server failed to start: cannot start the fault thread");
        tell_starter("cannot start the fault thread\n");
        return 1;
    }
    srv_coalesce_start();
    if (!st->adopted) {
        st->lfd = listen_on(CHAN_SOCKET_NAME);
        st->cfd = srv_control_listen();
    }
    if (st->lfd < 0 || st->cfd < 0) {
        srv_log("MPS server failed to start: cannot listen in %s: %s", srv.pipe_dir,
                strerror(errno));
        tell_starter("cannot listen in %s: %s\n", srv.pipe_dir, strerror(errno));
        return 1;
    }
    return GO_ON;
}

/* Readiness, for whoever started us (mpsshim-control -d waits for this file). Renamed
 * into place: a reader never finds it empty (a successor replaces it). */
static void write_pid_file(struct start *st)
{
    char fresh[620];
    snprintf(st->ready, sizeof(st->ready), "%s/server.pid", srv.pipe_dir);
    snprintf(fresh, sizeof(fresh), "%s.new", st->ready);
    int pidfd = open(fresh, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (pidfd >= 0) {
        dprintf(pidfd, "%d\n", (int)getpid());
        close(pidfd);
        if (rename(fresh, st->ready) != 0) unlink(fresh);
    }
}

/* The pipe of a fault's handover, a fresh start's state and admit.c's spare descriptor (among
 * those open at start), then "ready" in the log and to the starter. GO_ON or 1. */
static int announce_ready(struct start *st, char **argv)
{
    if (srv_handover_init(argv, st->lfd, st->cfd, st->lockfd) != 0) {
        srv_log("MPS server failed to start: cannot make the service's pipe: %s", strerror(errno));
        tell_starter("cannot make a pipe: %s\n", strerror(errno));
        return 1;
    }
    srv_recycle_init(argv, st->lfd, st->cfd, st->lockfd, st->foreground);
    srv_admit_init();
    if (srv.device_vmm)
        srv_log("cuMemAlloc is served from the server's arena of mapped memory "
                "(MPSSHIM_DEVICE_VMM=1, the default)%s",
                st->pool_asked ? "; MPSSHIM_DEVICE_POOL=1 is not taken while the arena is on" : "");
    else if (srv.device_pool)
        srv_log("cuMemAlloc is served from the server's memory pool (MPSSHIM_DEVICE_POOL=1)");
    else
        srv_log("cuMemAlloc is the driver's (MPSSHIM_DEVICE_VMM=0): a client's cuMemFree "
                "waits for every client's work on its device");
    /* A GPU's server, fresh: the defaults set in its pipe directory's own server. */
    if (!st->adopted) srv_siblings_inherit();
    srv_log("Server ready, pipe directory %s", srv.pipe_dir);
    if (st->successor) srv_handover_adopted(!first_use);
    if (st->afresh) srv_recycle_adopted();
    srv_handover_poll(); /* its standby, started before "ready" */
    tell_starter("ready\n");
    return GO_ON;
}

/* Once a successor took over after a fault: its sockets and lock now, and this server
 * ends with its last client (or with the successor). */
static void give_up_service(struct start *st)
{
    close(st->lfd);
    close(st->cfd);
    close(st->lockfd);
    st->lfd = st->cfd = st->lockfd = -1;
}

/* A new client or control connection, of those poll found waiting (n > 0). */
static void accept_waiting(struct start *st, const struct pollfd *fds, int n)
{
    /* Asked again: a successor may have begun starting during the poll. */
    if (n > 0 && (fds[0].revents & POLLIN) && srv_handover_accepting()) {
        int s = srv_admit_accept(st->lfd, 0);
        if (s >= 0) {
            srv_recycle_served();
            srv_client_start(s);
        }
    }
    if (n > 0 && (fds[1].revents & POLLIN)) {
        int s = srv_admit_accept(st->cfd, 1);
        if (s >= 0) srv_control_serve(s);
    }
}

/* Serves until told to quit. 1 when it ended handed over, no client or live server left. */
static int serve_clients(struct start *st)
{
    int ended = 0;
    while (!atomic_load(&srv.quitting)) {
        if (atomic_exchange(&reopen_logs, 0)) {
            srv_log_reopen();
            srv_handover_forward(SIGHUP, st->foreground); /* systemctl reload: the live one too */
        }
        /* While a successor starts, new clients wait in the backlog (handover.c). */
        struct pollfd fds[3] = {{.fd = srv_handover_accepting() ? st->lfd : -1, .events = POLLIN},
                                {.fd = st->cfd, .events = POLLIN},
                                {.fd = srv_handover_fd(), .events = POLLIN}};
        int n = poll(fds, 3, 200);
        if (n < 0 && errno != EINTR) break;
        srv_clients_watch();
        /* With no client left, the arena's kept slabs go back (arena.c), and so does the
         * stack the clients' kernels grew the contexts to (context.c): no client thread is
         * in a driver call then that this one could wait behind. */
        if (!srv_clients_live()) {
            if (srv.device_vmm && srv_arena_cached()) srv_arena_trim();
            srv_limits_idle();
            srv_unloads_idle(); /* libraries kept (unloads.c) */
        }
        /* Before accepting anything: a successor that is ready serves what arrives from now
         * on (a control command must not reach this faulted server once it has said so). */
        if (srv_handover_poll()) {
            n = 0;
            give_up_service(st);
        }
        accept_waiting(st, fds, n);
        srv_recycle_poll(srv_control_busy()); /* after the accepts: none is left half-served */
        if (srv_handover_done() && (srv_clients_live() == 0 || srv_handover_service_ended())) {
            ended = 1;
            atomic_store(&srv.quitting, 1); /* every thread's loop ends with it */
        }
    }
    return ended;
}

/* Closes the service (its socket files too, unless a successor serves on them), stops the
 * threads and releases the contexts. */
static void shut_down(struct start *st, int ended)
{
    srv_log("Server shutting down");
    if (st->lfd >= 0) close(st->lfd);
    if (st->cfd >= 0) close(st->cfd);
    if (!srv_handover_done()) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", srv.pipe_dir, CHAN_SOCKET_NAME);
        unlink(path);
        snprintf(path, sizeof(path), "%s/%s", srv.pipe_dir, CHAN_CONTROL_NAME);
        unlink(path);
        unlink(st->ready);
    }
    srv_handover_end(!ended, st->foreground);
    srv_fault_stop();
    srv_clients_stop();
    srv_pools_report();
    srv_quiet_release();
    srv_devctx_release_all();
    srv_log("Server exited");
    srv_handover_exit(st->foreground);
}

/* The process-wide settings every thread inherits, made before any thread starts. */
static void tune_process(void)
{
    /* The workers' short sleeps (5 us polls of a busy GPU, a busy client's last 2 ms,
     * waits.c and spin.c) must last about what they ask: Linux's default timer slack of 50 us
     * would stretch each into a wait longer than the work it waits for. Threads inherit it. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    /* One thread per client: glibc gives threads arenas of their own (up to 8 per core) that
     * never go back, and lets its mmap threshold grow to 32 MiB, so freed client buffers
     * stayed resident: a soak's stream of clients took the server to gigabytes resident in
     * 64 MB arenas (bench/NOTES.md, "malloc arenas"). A few arenas, a fixed threshold (bigger
     * blocks are mapped and unmapped) and a trim as each client leaves (client.c). */
    mallopt(M_ARENA_MAX, 4);
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

/* Each step's order matters: settings before the standby decision, directories before
 * the logs, the lock before the signals, devices before sockets, "ready" last. */
int main(int argc, char **argv)
{
    /* After a fault: this pid keeps watch over the server that took over (handover.c). */
    if (argc == 3 && strcmp(argv[1], "--keeper") == 0) return srv_keeper(argv[2]);
    drop_shim_preload(argv);
    tune_process();
    struct start st = {.lfd = -1, .cfd = -1, .lockfd = -1};
    st.log_stderr = isatty(2);
    int rc = read_args(argc, argv, &st);
    if (rc != GO_ON) return rc;
    srv_settings_paths();
    srv_clientspace_init(); /* before the driver and any thread: clientspace.c */
    srv_spin_init();
    srv_codegate_init();
    srv_waits_init();
    srv_seq_init();
    srv_coalesce_init();
    srv_settings_driver(&st.pool_asked);
    srv_settings_limits();
    if ((rc = prepare_process(&st)) != GO_ON || (rc = make_dirs(&st)) != GO_ON ||
        (rc = wait_as_standby(&st)) != GO_ON || (rc = open_logs(&st)) != GO_ON ||
        (rc = take_lock(&st)) != GO_ON)
        return rc;
    take_signals(st.foreground);
    if ((rc = start_service(&st)) != GO_ON) return rc;
    write_pid_file(&st);
    if ((rc = announce_ready(&st, argv)) != GO_ON) return rc;
    shut_down(&st, serve_clients(&st));
    return 0;
}
