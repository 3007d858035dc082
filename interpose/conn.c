/* The client's connection to mpsshim-server: find the socket, shake hands, map the
 * shared segment, and notice when the server goes away or the process forks. */
#include "interpose/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
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
static _Atomic int initialized;

/* Directory of the server's socket: MPSSHIM_ first, then the variable MPS users set. */
static const char *pipe_dir(void)
{
    const char *d = getenv("MPSSHIM_PIPE_DIRECTORY");
    if (!d || !*d)
        d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && *d ? d : CHAN_DEFAULT_PIPE_DIR;
}

static void on_fork_child(void)
{
    /* The child shares the parent's segment and socket; using them would interleave two
     * processes' requests. Like the real driver, CUDA is unusable in such a child. */
    if (atomic_load(&conn_state) == CONN_UP) {
        if (shim_conn.sock >= 0)
            close(shim_conn.sock);
        shim_conn.sock = -1;
        atomic_store(&conn_state, CONN_FORKED);
    }
    pthread_mutex_init(&conn_lock, NULL);
}

static int recv_with_fd(int sock, void *buf, size_t len, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = sizeof(cbuf)};
    *fd = -1;
    size_t got = 0;
    while (got < len) {
        iov.iov_base = (char *)buf + got;
        iov.iov_len = len - got;
        ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                memcpy(fd, CMSG_DATA(c), sizeof(int));
        m.msg_control = NULL;
        m.msg_controllen = 0;
        got += (size_t)n;
    }
    return 0;
}

int shim_recv_fd(void)
{
    uint8_t b;
    int fd;
    if (recv_with_fd(shim_conn.sock, &b, 1, &fd) != 0)
        return -1;
    return fd;
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
    if (n2 >= len)
        n2 = len - 1;
    memcpy(out, base, n2);
    out[n2] = '\0';
}

/* One attempt; on failure *why says why and the return value is the error to report. */
static CUresult try_connect(char *why, size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", pipe_dir(),
                         CHAN_SOCKET_NAME) >= sizeof(sa.sun_path)) {
        snprintf(why, whylen, "pipe directory path too long");
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(why, whylen, "no server at %s (%s)", sa.sun_path, strerror(errno));
        if (s >= 0)
            close(s);
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    struct chan_hello h = {.magic = CHAN_MAGIC,
                           .major = CHAN_PROTO_MAJOR,
                           .minor = CHAN_PROTO_MINOR,
                           .symbols_hash = SHIM_SYMBOLS_HASH,
                           .pid = getpid()};
    exe_name(h.exe, sizeof(h.exe));
    struct chan_welcome w;
    int fd = -1;
    if (send(s, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
        recv_with_fd(s, &w, sizeof(w), &fd) != 0) {
        snprintf(why, whylen, "server at %s hung up during the handshake", sa.sun_path);
        goto fail;
    }
    w.message[sizeof(w.message) - 1] = '\0';
    if (w.magic != CHAN_MAGIC || w.status != CHAN_WELCOME_OK) {
        snprintf(why, whylen, "server refused this client: %s",
                 w.magic == CHAN_MAGIC ? w.message : "not an mpsshim server");
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
    chan_attach(&shim_conn.ch, base);
    if (chan_check_header(&shim_conn.ch, why, whylen) != 0) {
        munmap(base, w.shm_size);
        goto fail;
    }
    memcpy(&shim_conn.dev, shim_conn.ch.devinfo, sizeof(shim_conn.dev));
    if (shim_conn.dev.ndev < 0 || shim_conn.dev.ndev > CHAN_MAX_DEVICES)
        shim_conn.dev.ndev = 0;
    shim_conn.sock = s;
    shim_conn.server_pid = w.server_pid;
    shim_conn.client_id = w.client_id;
    return CUDA_SUCCESS;
fail:
    if (fd >= 0)
        close(fd);
    close(s);
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
}

CUresult shim_connect(void)
{
    int st = atomic_load(&conn_state);
    if (st == CONN_UP)
        return CUDA_SUCCESS;
    if (st == CONN_FORKED)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&conn_lock);
    st = atomic_load(&conn_state);
    if (st == CONN_NONE) {
        pthread_atfork(NULL, NULL, on_fork_child);
        char why[512] = "";
        conn_error = try_connect(why, sizeof(why));
        if (conn_error == CUDA_SUCCESS) {
            atomic_store(&conn_state, CONN_UP);
        } else {
            shim_log("%s; CUDA calls will fail with %s", why,
                     shim_error_name(conn_error) ? shim_error_name(conn_error) : "an error");
            atomic_store(&conn_state, CONN_FAILED);
        }
    }
    st = atomic_load(&conn_state);
    pthread_mutex_unlock(&conn_lock);
    return st == CONN_UP ? CUDA_SUCCESS
                         : st == CONN_FORKED ? CUDA_ERROR_NOT_INITIALIZED : conn_error;
}

void shim_set_initialized(void)
{
    atomic_store(&initialized, 1);
}

CUresult shim_ready(void)
{
    if (!atomic_load_explicit(&initialized, memory_order_relaxed))
        return CUDA_ERROR_NOT_INITIALIZED;
    int st = atomic_load_explicit(&conn_state, memory_order_relaxed);
    if (st == CONN_UP)
        return atomic_load_explicit(&shim_conn.ch.shm->dead, memory_order_relaxed)
                   ? CUDA_ERROR_MPS_SERVER_NOT_READY
                   : CUDA_SUCCESS;
    return st == CONN_FORKED ? CUDA_ERROR_NOT_INITIALIZED : conn_error;
}

int shim_server_alive(void *unused)
{
    (void)unused;
    if (atomic_load(&conn_state) != CONN_UP || atomic_load(&shim_conn.ch.shm->dead))
        return 0;
    /* The server never sends unprompted data, so readable means hung up. */
    char b;
    ssize_t n = recv(shim_conn.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        atomic_store(&shim_conn.ch.shm->dead, 1);
        return 0;
    }
    return 1;
}
