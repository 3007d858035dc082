/* Reproducer of a finding of fuzz_server (issue 34, item 9): a client whose host functions'
 * sequence numbers are out of cyclic order leaves streams that its release cannot let go.
 *
 * The server enqueues, for the n-th host function, a wait until done[n % CHAN_CB_SLOTS] >= n
 * (cyclic GEQ) on the client's segment; when the client leaves, srv_hostfn_release stores
 * cb_last, the sequence number of the LAST host function enqueued, into every done word.
 * The shim numbers them 1, 2, 3...; a hostile client need not: after host functions 2^30 and
 * then 1, the first one's wait needs done >= 2^30 and gets 1, for ever.
 *
 * What happens then (the CPU test driver behind the server; MPSSHIM_RELEASE_TIMEOUT=3):
 *  - the release of client A gives up after the timeout ("its work was still running"): what
 *    it held stays allocated and its state is never freed (left_running);
 *  - its wait stays pending in the code gate (codegate.c), so every later module load on the
 *    device, by ANY client, waits at the gate until its own client leaves: client B's
 *    cuModuleLoadData never answers.
 * Expected: A's release lets every wait of A go (B's load answers at once).
 *
 * Usage (a server of BUILD running on $MPSSHIM_PIPE_DIRECTORY, see repro_hostfn_seq.sh):
 *   repro_hostfn_seq KERNELS_DIR [in-order]
 * exit 0: B's load was answered; 1: it was not (the bug). `in-order`: A's host functions are
 * numbered 1 and 2, as the shim numbers them (the control: B's load is answered). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel/chan.h"
#include "channel/desc.h"

struct session {
    int sock;
    struct chan c;
};

static int open_session(struct session *x)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir ? dir : CHAN_DEFAULT_PIPE_DIR,
             CHAN_SOCKET_NAME);
    x->sock = socket(AF_UNIX, SOCK_STREAM, 0);
    if (x->sock < 0 || connect(x->sock, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return -1;
    struct chan_hello h = {.head = {.magic = CHAN_MAGIC, .major = CHAN_PROTO_MAJOR,
                                    .minor = CHAN_PROTO_MINOR, .symbols_hash = SHIM_SYMBOLS_HASH,
                                    .pid = getpid(), .size = sizeof(struct chan_hello)}};
    snprintf(h.head.exe, sizeof(h.head.exe), "repro_hostfn_seq");
    struct chan_welcome w;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = sizeof(cbuf)};
    int fd = -1;
    if (send(x->sock, &h, sizeof(h), 0) != sizeof(h) ||
        recvmsg(x->sock, &m, MSG_WAITALL) != (ssize_t)sizeof(w) || w.status != CHAN_WELCOME_OK)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(c), sizeof(int));
    void *base = fd < 0 ? MAP_FAILED
                        : mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return -1;
    close(fd);
    chan_attach(&x->c, base);
    return 0;
}

static uint64_t deadline;
static int before_deadline(void *arg)
{
    (void)arg;
    return chan_now_ns() < deadline;
}

/* Sends one record (on lane 0 when it asks for a reply) of context 1. */
static struct chan_rec *put(struct session *x, unsigned op, int reply, const void *p,
                            size_t len)
{
    struct chan_wait wt = {.spin_ns = 1000, .alive = before_deadline};
    deadline = chan_now_ns() + 10000000000ull;
    struct chan_rec *r = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*r) + len), &wt);
    if (!r)
        return NULL;
    r->op = (uint16_t)op;
    r->flags = reply ? CHAN_RF_REPLY : 0;
    r->lane = 0;
    r->thread = 1;
    r->ctx = 1;
    memcpy(r + 1, p, len);
    chan_ring_publish(&x->c, r);
    return r;
}

/* A request answered on lane 0 within `secs`: its result, or -1 when none came. */
static long request(struct session *x, unsigned op, const void *p, size_t len, unsigned secs)
{
    uint32_t seq0 = atomic_load(&x->c.lanes[0].seq);
    if (!put(x, op, 1, p, len))
        return -1;
    struct chan_wait wt = {.spin_ns = 1000, .alive = before_deadline};
    deadline = chan_now_ns() + secs * 1000000000ull;
    if (chan_lane_wait(&x->c, 0, seq0, &wt) != 0)
        return -1;
    return x->c.lanes[0].result;
}

int main(int argc, char **argv)
{
    if (argc != 2 && !(argc == 3 && !strcmp(argv[2], "in-order"))) {
        fprintf(stderr, "usage: repro_hostfn_seq KERNELS_DIR [in-order]\n");
        return 2;
    }
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    struct session a, b;
    if (open_session(&a) != 0 || request(&a, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), 10) != 0) {
        fprintf(stderr, "no session for client A\n");
        return 2;
    }
    /* Client A: host functions 2^30, then 1, on its NULL stream; it never runs them, and
     * leaves. */
    struct chan_host_func h1 = {.stream = 0, .seq = argc == 3 ? 1 : 1u << 30},
                          h2 = {.stream = 0, .seq = argc == 3 ? 2 : 1};
    put(&a, CHAN_OP_HOST_FUNC, 0, &h1, sizeof(h1));
    put(&a, CHAN_OP_HOST_FUNC, 0, &h2, sizeof(h2));
    /* A synchronous call, so that both are enqueued before it goes. */
    request(&a, CHAN_OP_ERROR_STRING, &(int32_t){0}, sizeof(int32_t), 10);
    close(a.sock);
    printf("client A sent host functions %u and %u and left\n", h1.seq, h2.seq);
    sleep(1);
    /* Client B loads a module: its answer must come. */
    char path[600];
    snprintf(path, sizeof(path), "%s/kernels.ptx", argv[1]);
    FILE *f = fopen(path, "rb");
    static uint8_t img[1 << 16];
    size_t n = f ? fread(img, 1, sizeof(img) - 1, f) : 0;
    if (f)
        fclose(f);
    if (!n || open_session(&b) != 0 || request(&b, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), 10)) {
        fprintf(stderr, "no kernels.ptx in %s, or no session for client B\n", argv[1]);
        return 2;
    }
    img[n++] = 0;
    put(&b, CHAN_OP_BLOB, 0, img, n);
    struct chan_module_load ml = {.kind = CHAN_IMAGE_MODULE, .image_size = n};
    long r = request(&b, CHAN_OP_MODULE_LOAD, &ml, sizeof(ml), 15);
    if (r < 0) {
        printf("FAIL: client B's module load got no answer in 15 s (it waits at the code "
               "gate for client A's host function wait, which A's release never ended)\n");
        return 1;
    }
    printf("PASS: client B's module load answered (%s)\n", shim_error_name((CUresult)r));
    return 0;
}
