/* The client's connection to mpsshim-server: find the socket, shake hands, map the
 * shared segment, and notice when the server goes away or the process forks. */
#define _GNU_SOURCE
#include "interpose/shim.h"
#include "channel/fdpass.h"
#include "channel/prof.h"
#include "channel/layout.h"
#include "channel/settings.h"
#include "channel/spawn.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct shim_conn shim_conn = {.sock = -1};

enum conn_state {
    CONN_NONE = 0,   /* not tried yet */
    CONN_UP = 1,     /* connected */
    CONN_FAILED = 2, /* tried and failed: every call returns conn_error */
    CONN_FORKED = 3, /* this is a child of a process that had connected */
};

/* Guarded by conn_lock for writes; read without it once CONN_UP (it never changes back,
 * except in a forked child, which has one thread). */
static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int conn_state;
static CUresult conn_error;
static char conn_why[512];
/* The server refused this client for a reason that running without it would hide (it is
 * full, or the client's limits are malformed): no fallback to the real driver. */
static int conn_no_fallback;
/* The pipe directory's server is another user's: nothing to start there either. */
static int conn_foreign;
/* The last try found no server listening (nothing at the socket, or nobody accepting). */
static int conn_absent;
static _Atomic int initialized;

static void on_fork_child(void)
{
    /* The child shares the parent's segment and socket; using them would interleave two
     * processes' requests. Like the real driver, CUDA is unusable in such a child. */
    if (atomic_load(&conn_state) == CONN_UP) {
        if (shim_conn.sock >= 0) close(shim_conn.sock);
        shim_conn.sock = -1;
        for (int d = 0; d < CHAN_MAX_DEVICES; d++) {
            struct shim_conn *x = atomic_load(&shim_dev_conns[d]);
            if (x && x->sock >= 0) close(x->sock);
            if (x) x->sock = -1;
        }
        atomic_store(&conn_state, CONN_FORKED);
    }
    pthread_mutex_init(&conn_lock, NULL);
}

int shim_recv_fd_from(const struct shim_conn *c)
{
    uint8_t b;
    int fd;
    if (chan_recv_fd(c->sock, &b, 1, &fd) != 0) return -1;
    return fd;
}

int shim_recv_fd(void)
{
    return shim_recv_fd_from(&shim_conn);
}

static void exe_name(char *out, size_t len)
{
    char path[512];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) {
        snprintf(out, len, "?");
        return;
    }
    path[n] = '\0';
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n2 = strlen(base);
    if (n2 >= len) n2 = len - 1;
    memcpy(out, base, n2);
    out[n2] = '\0';
}

/* A limit from the environment, MPSSHIM_<name> else CUDA_MPS_<name> (as MPS users set it);
 * empty when neither is set. A value too long to send becomes one the server refuses,
 * never a cut one that might parse as something else. A bad value (said, naming the
 * variable as set) is sent as it is, for the server to refuse the client as MPS would;
 * *bad is then 1. */
static void limit_env(char *out, size_t len, enum chan_setting_id id, int *bad)
{
    int mine = 0;
    const char *v = chan_setting_text(id, &mine);
    if (v && strlen(v) >= len) v = "(value too long)";
    snprintf(out, len, "%s", v ? v : "");
    *bad |= mine;
}

/* ------------------------------------------------------- a server of this client's GPU */

/* MPSSHIM_SERVER_PER_GPU: a client whose CUDA_VISIBLE_DEVICES names one GPU (one index,
 * UUID or MIG name: no comma) is served in the pipe directory's folder gpu-<that value>, by
 * a server started there with that CUDA_VISIBLE_DEVICES, which holds that GPU alone.
 *
 * Why: the driver's fault is the process's (docs/differences.md): a server holding every
 * GPU's shared context loses all of its clients to one GPU's fault, and one process cannot
 * hold a second instance of the driver to keep a device apart (tools/faultns.c). A process
 * per GPU keeps it to that GPU's clients, as MPS does; sites bind a process to its GPU with
 * CUDA_VISIBLE_DEVICES (Slurm, Kubernetes' device plugins, MPI launch wrappers), so that is
 * what picks the server. A client that sees several GPUs, or all, is the pipe directory's own
 * server's, as without the setting.
 *
 * The value becomes part of a path, so only letters, digits, '_', '-' and '.' are taken (the
 * last two not first: "..", and "-1", which names no device), at most GPU_VALUE_MAX of them;
 * any other value is served as without the setting
 * (the pipe directory's server applies it as the driver would). Decided once, at the first
 * connection (conn_lock held); gpu_dir is empty when the setting does not apply. */
#define GPU_VALUE_MAX 96
static char gpu_dir[PATH_MAX];
static char gpu_value[GPU_VALUE_MAX + 1];

/* Takes the GPU's folder for value v (n bytes, not NUL-terminated): 0, or -1 when v cannot
 * name one (gpu_dir stays empty). */
static int take_gpu_value(const char *v, size_t n)
{
    if (!n || n > GPU_VALUE_MAX || v[0] == '.' || v[0] == '-' ||
        strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") < n)
        return -1;
    if ((size_t)snprintf(gpu_dir, sizeof(gpu_dir), "%s/gpu-%.*s", chan_pipe_dir(), (int)n, v) >=
        sizeof(gpu_dir) - sizeof(CHAN_SOCKET_NAME) - 1) {
        gpu_dir[0] = '\0';
        return -1;
    }
    memcpy(gpu_value, v, n);
    gpu_value[n] = '\0';
    return 0;
}

static void pick_gpu_server(void)
{
    static int picked;
    if (picked) return;
    picked = 1;
    /* Only when set to 1: "auto" (the default) moves such a client at its first context
     * instead, where the pipe directory's server says so (below). */
    if (chan_setting_num(CHAN_SET_SERVER_PER_GPU) != 1) return;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v && !strchr(v, ',')) take_gpu_value(v, strlen(v));
}

/* The directory this client's server is in: its GPU's folder, else the pipe directory. */
static const char *server_dir(void)
{
    return gpu_dir[0] ? gpu_dir : chan_pipe_dir();
}

/* A client moving to its GPU's server (below): it sees moved_of devices, its ordinal
 * moved_ordinal that server's device 0. moved_of 0: none. */
static int moved_of, moved_ordinal;

/* CUDA_VISIBLE_DEVICES as this process has it: the server applies it to its own devices
 * (their indices and UUIDs), as the driver would to the machine's. "-1" (no device, as
 * the driver parses it) stands in for a value too long to send whole. Not sent to a server
 * of this client's GPU, which the value picked: its one device is that GPU (applied again,
 * an index other than 0 would name a device it does not have). */
static void visible_env(struct chan_hello *h, int of, int ordinal)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    h->gpu_of = of;
    h->gpu_ordinal = ordinal;
    if (!v || gpu_dir[0]) return;
    h->visible_set = 1;
    snprintf(h->visible_devices, sizeof(h->visible_devices), "%s",
             strlen(v) < sizeof(h->visible_devices) ? v : "-1");
}

/* One attempt to connect `out` to the server in server_dir(), for a client that sees `of`
 * devices and is that server's for its device `ordinal` (0 0: every device it sees); on
 * failure *why says why and the return value is the error to report. */
static CUresult try_connect_to(struct shim_conn *out, int of, int ordinal, char *why, size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", server_dir(),
                         CHAN_SOCKET_NAME) >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "pipe directory path too long");
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    conn_absent = 0;
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        conn_absent = s >= 0 && (errno == ENOENT || errno == ECONNREFUSED);
        snprintf(why, whylen, "no server at %s (%s)", sa.sun_path, strerror(errno));
        if (s >= 0) close(s);
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    /* Only a server of our own user gets our calls and memory: one another user started
     * in a directory we share would see everything this process does on the GPU. */
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.uid != geteuid()) {
        snprintf(why, whylen,
                 "the server at %s runs as user %u, this process as user %u: not using it "
                 "(a server of your own needs a pipe directory of your own)",
                 sa.sun_path, (unsigned)cr.uid, (unsigned)geteuid());
        conn_foreign = 1;
        close(s);
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    struct chan_hello h = chan_hello_make(SHIM_SYMBOLS_HASH, getpid());
    exe_name(h.head.exe, sizeof(h.head.exe));
    int bad_limit = 0;
    limit_env(h.active_thread_percentage, sizeof(h.active_thread_percentage),
              CHAN_SET_ACTIVE_THREAD_PERCENTAGE, &bad_limit);
    limit_env(h.pinned_mem_limit, sizeof(h.pinned_mem_limit), CHAN_SET_PINNED_DEVICE_MEM_LIMIT,
              &bad_limit);
    limit_env(h.client_priority, sizeof(h.client_priority), CHAN_SET_CLIENT_PRIORITY, &bad_limit);
    visible_env(&h, of, ordinal);
    struct chan_welcome w;
    int fd = -1;
    /* The answer is read even when the hello could not be sent: a server out of
     * descriptors refuses at once and closes (server/control/admit.c), maybe before it. */
    int sent = send(s, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h);
    if (chan_recv_fd(s, &w, sizeof(w), &fd) != 0 || (!sent && w.status == CHAN_WELCOME_OK)) {
        snprintf(why, whylen, "server at %s hung up during the handshake", sa.sun_path);
        goto fail;
    }
    w.message[sizeof(w.message) - 1] = '\0';
    if (w.magic != CHAN_MAGIC || w.status != CHAN_WELCOME_OK) {
        snprintf(why, whylen, "server refused this client: %s%s",
                 w.magic == CHAN_MAGIC ? w.message : "not an mpsshim server",
                 bad_limit ? " (the setting said above)" : "");
        /* As an MPS client past the server's client limit, or with limits the server
         * rejects: the error, not a run without the limits the operator set. */
        if (w.magic == CHAN_MAGIC &&
            (w.status == CHAN_WELCOME_FULL || w.status == CHAN_WELCOME_LIMITS)) {
            conn_no_fallback = 1;
            close(s);
            if (fd >= 0) close(fd);
            return w.status == CHAN_WELCOME_FULL ? CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
                                                 : CUDA_ERROR_MPS_CONNECTION_FAILED;
        }
        goto fail;
    }
    if (fd < 0 || w.shm_size != chan_segment_size()) {
        snprintf(why, whylen, "server sent no usable shared segment");
        goto fail;
    }
    void *base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    fd = -1;
    if (base == MAP_FAILED) {
        snprintf(why, whylen, "cannot map the shared segment: %s", strerror(errno));
        goto fail;
    }
    chan_attach(&out->ch, base);
    if (chan_check_header(&out->ch, why, whylen) != 0) {
        munmap(base, w.shm_size);
        goto fail;
    }
    memcpy(&out->dev, out->ch.devinfo, sizeof(out->dev));
    if (out->dev.ndev < 0 || out->dev.ndev > CHAN_MAX_DEVICES) out->dev.ndev = 0;
    out->sock = s;
    out->server_pid = w.server_pid;
    out->client_id = w.client_id;
    out->server_minor = w.minor;
    out->server_flags = w.flags;
    return CUDA_SUCCESS;
fail:
    if (fd >= 0) close(fd);
    close(s);
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
}

/* ---------------------------------------------------------------- starting a server */

/* The server binary: MPSSHIM_SERVER, else the one found from this library's directory
 * (beside it in a build tree, ../../bin when installed in PREFIX/lib/mpsshim, ../bin in
 * PREFIX/lib). 0, or -1 with out naming the first place looked. */
static int server_path(char *out, size_t len)
{
    const char *env = chan_setting_text(CHAN_SET_SERVER, NULL);
    Dl_info self;
    if (env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    if (dladdr((void *)server_path, &self) && self.dli_fname && *self.dli_fname) {
        static const char *const near[] = CHAN_SERVER_NEAR_SHIM;
        return chan_find_near(self.dli_fname, near, X_OK, out, len);
    }
    snprintf(out, len, "mpsshim-server");
    return -1;
}

/* Whether environment entry e sets variable name (given with its '='). */
static int sets(const char *e, const char *name)
{
    return strncmp(e, name, strlen(name)) == 0;
}

/* The environment for the server: ours, without the shim in LD_PRELOAD (the server must
 * never be its own client), plus the fd it reports readiness on. A server of this client's
 * GPU gets its folder as pipe directory, gpu-VALUE in the pipe directory's log directory as
 * its own, and the CUDA_VISIBLE_DEVICES that picked it. Built before fork:
 * only async-signal-safe calls may follow it in a multi-threaded process. */
static char **server_env(int ready_fd)
{
    static char fdvar[32], pipevar[PATH_MAX + 32], logvar[PATH_MAX + 32];
    size_t n = 0;
    while (environ[n])
        n++;
    static char visvar[GPU_VALUE_MAX + 32];
    char **env = calloc(n + 5, sizeof(*env));
    if (!env) return NULL;
    size_t k = 0;
    if (gpu_dir[0]) {
        snprintf(visvar, sizeof(visvar), "CUDA_VISIBLE_DEVICES=%s", gpu_value);
        env[k++] = visvar;
        /* Its log in the pipe directory's log directory (the one set, else the default),
         * folder gpu-VALUE: never the same files as another server's. */
        char buf[256];
        snprintf(pipevar, sizeof(pipevar), "MPSSHIM_PIPE_DIRECTORY=%s", gpu_dir);
        snprintf(logvar, sizeof(logvar), "MPSSHIM_LOG_DIRECTORY=%s/gpu-%s",
                 chan_log_dir(buf, sizeof(buf)), gpu_value);
        env[k++] = pipevar;
        env[k++] = logvar;
    }
    for (size_t i = 0; i < n; i++) {
        if (sets(environ[i], "LD_PRELOAD=") && strstr(environ[i], "libmpsshim")) continue;
        if (sets(environ[i], "MPSSHIM_READY_FD=")) continue;
        /* The server sees every device; this client's own CUDA_VISIBLE_DEVICES selects
         * among them (sent in the hello), as any later client's does. Passed on, it would
         * apply twice (the server's device 0 would be what this client calls 1). A server of
         * this client's GPU gets the value that names that GPU (above) instead. */
        if (sets(environ[i], "CUDA_VISIBLE_DEVICES=")) continue;
        if (gpu_dir[0] && (sets(environ[i], "MPSSHIM_PIPE_DIRECTORY=") ||
                           sets(environ[i], "CUDA_MPS_PIPE_DIRECTORY=") ||
                           sets(environ[i], "MPSSHIM_LOG_DIRECTORY=") ||
                           sets(environ[i], "CUDA_MPS_LOG_DIRECTORY=")))
            continue;
        env[k++] = environ[i];
    }
    snprintf(fdvar, sizeof(fdvar), "MPSSHIM_READY_FD=%d", ready_fd);
    env[k++] = fdvar;
    env[k] = NULL;
    return env;
}

/* Starts a detached server and waits until it serves. 0, or -1 with *why. */
static int start_server(char *why, size_t whylen)
{
    char path[PATH_MAX];
    if (server_path(path, sizeof(path)) != 0) {
        snprintf(why, whylen,
                 "no mpsshim-server at %.200s, nor in ../../bin or ../bin from there "
                 "(MPSSHIM_SERVER names one)",
                 path);
        return -1;
    }
    if (access(path, X_OK) != 0) {
        snprintf(why, whylen, "cannot start %.200s: %s", path, strerror(errno));
        return -1;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(why, whylen, "cannot start a server: %s", strerror(errno));
        return -1;
    }
    char **env = server_env(CHAN_READY_FD);
    char *const argv[] = {"mpsshim-server", NULL};
    pid_t pid = env ? fork() : -1;
    if (pid == 0) {
        /* Child: a grandchild in a session of its own, so that the server outlives us
         * and no terminal signal of ours reaches it. */
        setsid();
        if (fork() != 0) _exit(0);
        if (chan_server_fds(p[1]) != 0) _exit(127);
        execve(path, argv, env);
        _exit(127);
    }
    free(env);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        snprintf(why, whylen, "cannot start a server: %s", strerror(errno));
        return -1;
    }
    char msg[512];
    if (chan_wait_ready(pid, p[0], msg, sizeof(msg)) == 0) return 0;
    snprintf(why, whylen, "could not start %.200s: %.200s", path,
             *msg ? msg : "it exited without a word");
    return -1;
}

/* MPSSHIM_SERVER_WAIT=S (whole seconds, 0 by default, at most 3600): a client that may not
 * start a server (MPSSHIM_AUTOSTART=0) waits up to S s for one to listen, as an application
 * container beside the server's own (ops/k8s) must: they start together. */
static unsigned server_wait_s(void)
{
    return (unsigned)chan_setting_num(CHAN_SET_SERVER_WAIT);
}

/* Tries again every 100 ms while no server listens, for MPSSHIM_SERVER_WAIT seconds. */
static CUresult wait_for_server(struct shim_conn *out, int of, int ordinal, CUresult r, char *why,
                                size_t whylen)
{
    uint64_t until = chan_now_ns() + (uint64_t)server_wait_s() * 1000000000ull;
    while (r != CUDA_SUCCESS && conn_absent && chan_now_ns() < until) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        r = try_connect_to(out, of, ordinal, why, whylen);
    }
    return r;
}

/* Connects `out` (try_connect_to), starting a server first when none answers: exactly one
 * per pipe directory, however many clients (MPI ranks) try at once, thanks to a lock file in
 * that directory. Where it may not start one, it may wait for one (MPSSHIM_SERVER_WAIT). */
static CUresult connect_or_start_to(struct shim_conn *out, int of, int ordinal, char *why,
                                    size_t whylen)
{
    CUresult r = try_connect_to(out, of, ordinal, why, whylen);
    if (r != CUDA_SUCCESS && !chan_setting_num(CHAN_SET_AUTOSTART))
        return wait_for_server(out, of, ordinal, r, why, whylen);
    if (r == CUDA_SUCCESS || conn_no_fallback || conn_foreign) return r;
    char lock[PATH_MAX];
    if (chan_make_dirs(server_dir()) != 0 ||
        (size_t)snprintf(lock, sizeof(lock), "%s/autostart.lock", server_dir()) >= sizeof(lock))
        return r;
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return r;
    flock(fd, LOCK_EX);
    /* Whoever held the lock before us may have started it. */
    if ((r = try_connect_to(out, of, ordinal, why, whylen)) != CUDA_SUCCESS && !conn_no_fallback &&
        start_server(why, whylen) == 0)
        r = try_connect_to(out, of, ordinal, why, whylen);
    flock(fd, LOCK_UN);
    close(fd);
    return r;
}

/* The process's first connection (shim_conn), or its move (moved_of devices, its ordinal
 * moved_ordinal that server's). */
static CUresult connect_or_start(char *why, size_t whylen)
{
    return connect_or_start_to(&shim_conn, moved_of, moved_ordinal, why, whylen);
}

void shim_fall_back(const char *why);

/* ------------------------------------------------ moving to a GPU's server at first use */

/* MPSSHIM_SERVER_PER_GPU_MOVE=1 (with MPSSHIM_SERVER_PER_GPU=1), for a client that sees
 * several GPUs (a process that picks its GPU with cudaSetDevice: an inference worker, an MPI
 * rank, torchrun's ranks): it connects to the pipe directory's server (its
 * device queries need every device), and before its first context, on device d, it moves to
 * d's own server, in the folder gpu-<d's CUDA_VISIBLE_DEVICES entry, or d>, as a client bound
 * to that GPU by CUDA_VISIBLE_DEVICES would (the same folder, so one server per GPU). From
 * then on it is that server's client alone: a fault on another GPU does not reach it, and
 * physical memory passed between GPUs' servers is carried (server/memory/ipcpeer.c).
 *
 * Why at the first context: nothing of the client's need be in the first server yet but its
 * connection, so the move can lose nothing. It moves only when that server says it holds no
 * record of the client's (CHAN_OP_HOLDS, answered after everything sent before it), no
 * other thread awaits a reply, and nothing with effects was sent since that answer
 * (shim_rpc_alone), so that nothing is on its way to the old server; else it stays there,
 * said once (what cudart loads before the context, libraries for one, is such a record). It keeps
 * the first server's description of its devices (the new server publishes only its one device). The
 * new server must hold the same GPU (UUIDs compared): a pipe directory's server started with a
 * CUDA_VISIBLE_DEVICES of its own numbers devices otherwise, and the client then stays. */
static int moved_tried;
static struct shim_conn moved_old; /* the first connection, while the move is decided */

/* Whether this process moves at its first context: decided once it is connected to the pipe
 * directory's server (not to its GPU's: gpu_dir still empty), under conn_lock, and kept (the
 * connection it was decided on is replaced by the move). Both settings 1: it moves when it
 * sees several GPUs, as before "auto" existed. Otherwise, neither 0 (both "auto" by
 * default): it moves when that server says its clients do (CHAN_WELCOME_MOVES: a server of
 * several GPUs that made no context yet), whether it sees several GPUs or one
 * (CUDA_VISIBLE_DEVICES naming one: with MPSSHIM_SERVER_PER_GPU=1 it would have gone to that
 * GPU's server at once; "auto" asks the pipe directory's server first, so that one holding
 * one GPU, or started with a CUDA_VISIBLE_DEVICES of its own, keeps its clients). */
static int move_wanted, move_asked; /* move_asked: both settings 1 */

static void decide_move(void)
{
    unsigned long long per = chan_setting_num(CHAN_SET_SERVER_PER_GPU),
                       move = chan_setting_num(CHAN_SET_SERVER_PER_GPU_MOVE);
    int ndev = shim_conn.dev.ndev;
    move_asked = per == 1 && move == 1;
    if (!per || !move || gpu_dir[0] || ndev < 1)
        move_wanted = 0;
    else if (move_asked)
        move_wanted = ndev >= 2;
    else
        move_wanted = (shim_conn.server_flags & CHAN_WELCOME_MOVES) != 0;
}

/* A process that asks whether two of its GPUs reach each other before its first context
 * (cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute: moved.c tells) means to use them together,
 * as CUDA's multi-GPU programs check first: by default it stays with the pipe directory's
 * server, which serves every GPU and everything a process does across them (managed memory,
 * pools' peer access, graphs of both GPUs), where its GPUs' own servers would refuse some of
 * it (docs/operations.md). A process that uses one GPU (an MPI rank, a DDP rank, an inference
 * worker) asks nothing of the kind before its context, and moves. Both settings 1: it moves
 * all the same. Set before the move is decided; read once, by the thread that decides. */
static _Atomic int peer_asked;

void shim_conn_peer_asked(void)
{
    if (!atomic_load_explicit(&peer_asked, memory_order_relaxed)) atomic_store(&peer_asked, 1);
}

int shim_may_use_servers(void)
{
    /* Before the move is decided, a process that may move; after, one that did (a process
     * that stayed has one server for all its GPUs). */
    return atomic_load(&conn_state) == CONN_UP && move_wanted &&
           (moved_of ? moved_of >= 2 : !moved_tried && shim_conn.dev.ndev >= 2);
}

/* d's CUDA_VISIBLE_DEVICES entry (or its number), as the folder's name. 0, or -1. */
static int gpu_value_of(int d)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) {
        char num[16];
        snprintf(num, sizeof(num), "%d", d);
        return take_gpu_value(num, strlen(num));
    }
    for (int i = 0; i < d && v; i++) {
        v = strchr(v, ',');
        if (v) v++;
    }
    return v ? take_gpu_value(v, strcspn(v, ",")) : -1;
}

/* Under shim_rpc_alone: connects to the GPU's server and, if it holds the same GPU, drops
 * the first connection. 0, or MOVE_FAILED (said here, unless quiet) with the first
 * connection kept and gpu_dir empty: not -1 or -2, which are shim_rpc_alone's own. */
#define MOVE_FAILED (-5)
static int move_now(void *arg)
{
    int d = *(int *)arg;
    moved_old = shim_conn;
    int no_fallback = conn_no_fallback, foreign = conn_foreign;
    moved_of = moved_old.dev.ndev;
    moved_ordinal = d;
    char why[512];
    /* A client that may not start servers (MPSSHIM_AUTOSTART=0: a site that starts them
     * itself) moves only to a GPU's server already listening, at once, and otherwise stays
     * without a word: it must not wait MPSSHIM_SERVER_WAIT for a server no one starts. */
    int autostart = (int)chan_setting_num(CHAN_SET_AUTOSTART);
    CUresult r = autostart ? connect_or_start(why, sizeof(why))
                           : try_connect_to(&shim_conn, moved_of, moved_ordinal, why, sizeof(why));
    int quiet = r != CUDA_SUCCESS && !autostart && conn_absent;
    if (r == CUDA_SUCCESS && memcmp(&shim_conn.dev.dev[d].uuid, &moved_old.dev.dev[d].uuid,
                                    sizeof(moved_old.dev.dev[d].uuid)) != 0) {
        snprintf(why, sizeof(why),
                 "the server in %.300s holds another GPU than this process's "
                 "device %d",
                 gpu_dir, d);
        close(shim_conn.sock); /* its segment stays mapped: see below */
        r = CUDA_ERROR_INVALID_DEVICE;
    }
    conn_no_fallback = no_fallback;
    conn_foreign = foreign;
    if (r != CUDA_SUCCESS) {
        if (!quiet)
            shim_log("MPSSHIM_SERVER_PER_GPU: staying with the pipe directory's server (%s)", why);
        shim_conn = moved_old;
        moved_of = 0;
        gpu_dir[0] = '\0';
        return MOVE_FAILED;
    }
    shim_conn.dev = moved_old.dev;
    /* The old segment stays mapped for the process's life: a thread outside any call's
     * locks (shim_ready's check of the segment's `dead`, a device query on another thread)
     * may have read its address just before the move. Its cost is the few pages it
     * touched. */
    close(moved_old.sock);
    return 0;
}

int shim_moved_ordinal(int *of)
{
    *of = moved_of;
    return moved_of ? moved_ordinal : -1;
}

/* Whether the server holds no record of this client's, asked after all it was sent. */
static int holds_nothing(void)
{
    struct shim_req q;
    const uint8_t *data = NULL;
    uint32_t n = 0;
    uint64_t held = 1;
    if (shim_req_begin(&q, CHAN_OP_HOLDS, 0, 1, SHIM_RQ_QUIET) != CUDA_SUCCESS) return 0;
    shim_req_send(&q);
    if (shim_req_wait(&q, &data, &n) != CUDA_SUCCESS || n != sizeof(held)) return 0;
    memcpy(&held, data, sizeof(held));
    return held == 0;
}

/* ------------------------------------------ a moved client's other devices (issue 30) */

/* A moved client that makes a context on another device d connects to d's own server too,
 * as it connected to its first device's (the folder and hello a client bound to d, or moved
 * to d, would use), and its requests for d go there (rpc.c: by their context's device, or the
 * stream, event or context they name: call.c). So each GPU it uses is served by that GPU's
 * server alone, and a fault on one leaves its work on the others running, as MPS keeps a
 * fault to its GPU. The new server must hold the same GPU (UUIDs compared, as for the move).
 * Connections are never closed before the process ends (a request of another thread may
 * still hold one); slots 1.. of rpc.c's locks, one per device at most. Under conn_lock. */
static int next_slot = 1;
/* Why this process may not hold a second connection now, or NULL: the families whose state
 * lives in one server say (replicas.c registers it as the library loads; conn.c, which every
 * family uses, names none of them). */
static const char *(*split_refusals[4])(void);

void shim_conn_on_split(const char *(*why_not)(void))
{
    for (size_t i = 0; i < sizeof(split_refusals) / sizeof(split_refusals[0]); i++)
        if (!split_refusals[i]) {
            split_refusals[i] = why_not;
            return;
        }
}

static const char *split_refusal(void)
{
    const char *why = NULL;
    for (size_t i = 0; !why && i < sizeof(split_refusals) / sizeof(split_refusals[0]); i++)
        if (split_refusals[i]) why = split_refusals[i]();
    return why;
}

static CUresult open_device(int dev)
{
    if (atomic_load(&shim_dev_conns[dev])) return CUDA_SUCCESS;
    char why[512] = "";
    char saved_dir[sizeof(gpu_dir)], saved_value[sizeof(gpu_value)];
    memcpy(saved_dir, gpu_dir, sizeof(gpu_dir));
    memcpy(saved_value, gpu_value, sizeof(gpu_value));
    struct shim_conn *n = NULL;
    CUresult r = CUDA_ERROR_INVALID_DEVICE;
    const char *refused = split_refusal();
    if (next_slot >= SHIM_CONNS)
        snprintf(why, sizeof(why), "no connection left (%d)", SHIM_CONNS);
    else if (refused)
        snprintf(why, sizeof(why), "%s", refused);
    else if (gpu_value_of(dev) != 0)
        snprintf(why, sizeof(why), "its CUDA_VISIBLE_DEVICES entry cannot name a folder");
    else if (!(n = calloc(1, sizeof(*n))))
        snprintf(why, sizeof(why), "out of host memory");
    else {
        int no_fallback = conn_no_fallback, foreign = conn_foreign;
        n->sock = -1;
        r = connect_or_start_to(n, moved_of, dev, why, sizeof(why));
        conn_no_fallback = no_fallback;
        conn_foreign = foreign;
        if (r == CUDA_SUCCESS && memcmp(&n->dev.dev[dev].uuid, &shim_conn.dev.dev[dev].uuid,
                                        sizeof(n->dev.dev[dev].uuid)) != 0) {
            snprintf(why, sizeof(why), "the server in %.300s holds another GPU", gpu_dir);
            close(n->sock); /* its segment stays mapped, as a move's old one does */
            r = CUDA_ERROR_INVALID_DEVICE;
        }
    }
    memcpy(gpu_dir, saved_dir, sizeof(gpu_dir));
    memcpy(gpu_value, saved_value, sizeof(gpu_value));
    if (r != CUDA_SUCCESS) {
        free(n);
        shim_log("device %d: its GPU's own server could not serve this process (%s): "
                 "CUDA_ERROR_INVALID_DEVICE (MPSSHIM_SERVER_PER_GPU=0 serves it, one server for "
                 "every GPU)",
                 dev, why);
        return CUDA_ERROR_INVALID_DEVICE;
    }
    n->dev = shim_conn.dev; /* the description of every device, as the move keeps it */
    n->slot = next_slot++;
    atomic_store_explicit(&shim_dev_conns[dev], n, memory_order_release);
    atomic_store_explicit(&shim_conns_extra, 1, memory_order_release);
    return CUDA_SUCCESS;
}

static CUresult move_at_first(int dev);

CUresult shim_gpu_server_for(int dev)
{
    if (moved_of) {
        if (dev == moved_ordinal || dev < 0 || dev >= moved_of || dev >= CHAN_MAX_DEVICES)
            return CUDA_SUCCESS;
        pthread_mutex_lock(&conn_lock);
        CUresult r = open_device(dev);
        pthread_mutex_unlock(&conn_lock);
        return r;
    }
    if (moved_tried) return CUDA_SUCCESS;
    moved_tried = 1;
    CUresult r = move_at_first(dev);
    shim_rpc_count_waits(0); /* decided: no move comes any more */
    return r;
}

/* shim_gpu_server_for's first call in a process that did not move yet: the move, or not. */
static CUresult move_at_first(int dev)
{
    if (atomic_load(&conn_state) != CONN_UP || !move_wanted || dev < 0 || dev >= shim_conn.dev.ndev)
        return CUDA_SUCCESS;
    if (!move_asked && atomic_load(&peer_asked)) return CUDA_SUCCESS; /* stays, quietly */
    uint64_t seen = atomic_load(&shim_work_sent);
    int rc = gpu_value_of(dev) != 0 ? -3 : !holds_nothing() ? -4 : 0;
    if (!rc) {
        pthread_mutex_lock(&conn_lock);
        rc = shim_rpc_alone(move_now, &dev, seen);
        pthread_mutex_unlock(&conn_lock);
    }
    if (rc == -1 || rc == -2 || rc == -3 || rc == -4) {
        gpu_dir[0] = '\0';
        shim_log("MPSSHIM_SERVER_PER_GPU: staying with the pipe directory's server, which "
                 "serves every GPU (%s)",
                 rc == -1   ? "another thread of it awaited a reply at its first context"
                 : rc == -2 ? "another thread sent work at the first context"
                 : rc == -3 ? "the device's CUDA_VISIBLE_DEVICES entry cannot name a folder"
                            : "it holds objects there made before its first context");
    }
    return CUDA_SUCCESS;
}

/* PROFILE=1 builds: where this process's waits went, on stderr when it exits. */
static void profile_at_exit(void)
{
    char prof[256];
    chan_prof_format(prof, sizeof(prof));
    fprintf(stderr, "mpsshim profile (client %d): %s\n", (int)getpid(), prof);
}

CUresult shim_connect(void)
{
    int st = atomic_load(&conn_state);
    if (st == CONN_UP) return CUDA_SUCCESS;
    if (st == CONN_FORKED) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&conn_lock);
    st = atomic_load(&conn_state);
    if (st == CONN_NONE) {
        /* Every client setting's bad value said now, some being read late or never. */
        chan_settings_check("client");
        pthread_atfork(NULL, NULL, on_fork_child);
        pick_gpu_server();
        conn_error = connect_or_start(conn_why, sizeof(conn_why));
        /* A move to a GPU's server may come: it needs to know that no reply is awaited. */
        if (conn_error == CUDA_SUCCESS) decide_move();
        if (conn_error == CUDA_SUCCESS && move_wanted) shim_rpc_count_waits(1);
        /* Before any answer: cuGetProcAddress waits for this decision like every entry. */
        if (conn_error == CUDA_SUCCESS) shim_procaddr_fetch(shim_conn.server_minor);
        if (conn_error == CUDA_SUCCESS && CHAN_PROFILING) atexit(profile_at_exit);
        if (conn_error == CUDA_SUCCESS) {
            atomic_store(&conn_state, CONN_UP);
            atomic_store(&shim_mode, SHIM_MODE_SERVER);
        } else if (conn_no_fallback) {
            atomic_store(&conn_state, CONN_FAILED);
            atomic_store(&shim_mode, SHIM_MODE_NONE);
            shim_log("%s; CUDA calls return %s", conn_why, shim_error_name(conn_error));
        } else {
            atomic_store(&conn_state, CONN_FAILED);
            shim_fall_back(conn_why);
        }
    }
    st = atomic_load(&conn_state);
    pthread_mutex_unlock(&conn_lock);
    return st == CONN_UP       ? CUDA_SUCCESS
           : st == CONN_FORKED ? CUDA_ERROR_NOT_INITIALIZED
                               : conn_error;
}

const char *shim_connect_error(void)
{
    return conn_why;
}

void shim_set_initialized(void)
{
    atomic_store(&initialized, 1);
}

CUresult shim_conn_dead_error(const struct shim_conn *c)
{
    if (atomic_load(&conn_state) != CONN_UP) return CUDA_ERROR_MPS_SERVER_NOT_READY;
    return atomic_load(&c->ch.shm->dead) == CHAN_DEAD_TERMINATED ? CUDA_ERROR_MPS_CLIENT_TERMINATED
                                                                 : CUDA_ERROR_MPS_SERVER_NOT_READY;
}

CUresult shim_dead_error(void)
{
    return shim_conn_dead_error(&shim_conn);
}

CUresult shim_ready(void)
{
    if (!atomic_load_explicit(&initialized, memory_order_relaxed)) {
        /* A refused client's every call reports why (cuInit included, and anything
         * called before it). */
        if (atomic_load(&conn_state) == CONN_FAILED && conn_no_fallback) return conn_error;
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    int st = atomic_load_explicit(&conn_state, memory_order_relaxed);
    if (st == CONN_UP)
        return atomic_load_explicit(&shim_conn.ch.shm->dead, memory_order_relaxed)
                   ? shim_dead_error() /* sticky, as MPS's CLIENT_TERMINATED */
                   : CUDA_SUCCESS;
    return st == CONN_FORKED ? CUDA_ERROR_NOT_INITIALIZED : conn_error;
}

int shim_conn_up(void)
{
    return atomic_load_explicit(&conn_state, memory_order_acquire) == CONN_UP &&
           !atomic_load_explicit(&shim_conn.ch.shm->dead, memory_order_relaxed);
}

int shim_server_alive(void *conn)
{
    struct shim_conn *c = conn ? conn : &shim_conn;
    if (atomic_load(&conn_state) != CONN_UP || atomic_load(&c->ch.shm->dead)) return 0;
    /* The server never sends unprompted data, so readable means hung up. */
    char b;
    ssize_t n = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        atomic_store(&c->ch.shm->dead, 1);
        return 0;
    }
    return 1;
}
