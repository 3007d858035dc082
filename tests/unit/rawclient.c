/* A client that speaks the wire protocol by hand, to test how the server treats bad input:
 *   rawclient version   hello with another protocol version: must be refused, naming both
 *   rawclient garbage   valid handshake, then malformed records: the server must drop this
 *                       client (and keep serving others)
 *   rawclient silent    connects and says nothing: the server must time the handshake out
 *   rawclient scribble  while its cuArrayCreate_v2 calls are answered, a second thread keeps
 *                       writing another client's array handle into its reply lane: the server
 *                       must register what the driver made, never what the lane says, so the
 *                       other client's array stays out of reach (cuArrayDestroy refused)
 *   rawclient trickle   sends its hello one byte a second: the server must hang up once the
 *                       handshake's time is out, not wait as long as bytes keep coming
 *   rawclient crowd N S holds N connections that never say hello for S seconds (the CI tier
 *                       checks meanwhile that real clients are still served)
 *   rawclient hostile   well-formed calls a hostile client makes, bypassing every check the
 *                       shim does: sizes and pitches whose spans wrap 64 bits, extents far
 *                       beyond its allocation, images whose headers wrap, __managed__
 *                       variable transfers naming memory that is not such a variable of its
 *                       own (another client's, device memory, past or wrapping the end, more
 *                       entries or bytes than the record holds), batched copies whose members,
 *                       attributes or staged bytes do not add up; each must be refused by the
 *                       server with an error, and the server must go on
 *   rawclient devices   given the server's device 1 alone, forges device 1 in contexts,
 *                       CUdevice parameters, CUmemLocation ids and peer copies: each must
 *                       be refused with CUDA_ERROR_INVALID_DEVICE, device 0 mapped to 1
 *   rawclient shrink    registers host memory (cuMemHostRegister's protocol: a descriptor on
 *                       the socket, then the record) backed by what a hostile client may
 *                       send: an unsealed memfd, a file, a memfd sealed against growing only
 *                       (each must be refused), and a memfd sealed against shrinking (taken);
 *                       with a stream wait on each one taken, it tries to shrink them to 0
 *                       (must fail), punches a hole in the sealed one (allowed) and leaves:
 *                       the server must survive its stores into those pages
 *                       (tests/hostreg_shrink.sh checks it does)
 *   rawclient accounts  one process, several connections (the server started with
 *                       MPSSHIM_MAX_PINNED_MB=4 and MPSSHIM_MAX_OBJECTS=300 by
 *                       tests/accounts.sh): a 4 MiB device memory limit, 4 MiB of pinned
 *                       memory and 300 records hold for the process, not for each
 *                       connection: 3 MiB in one connection, then 3 MiB more in another
 *                       must be refused, 1 MiB taken; likewise pinned memory; events
 *                       made across connections stop at the cap with
 *                       CUDA_ERROR_OUT_OF_MEMORY, and one destroyed makes room for one; a
 *                       ninth connection of the process is refused
 *   rawclient fuzz S N  N records of random operations and payloads (seed S), over as many
 *                       sessions as it takes (the server hangs up on protocol errors); the
 *                       server must survive (the CI tier then checks it still serves)
 * Exit 0 when the server behaved as it must. Uses $MPSSHIM_PIPE_DIRECTORY. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "channel/chan.h"
#include "channel/desc.h"
#include "channel/fdpass.h"
#include "channel/marshal.h"

static int dial(void)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir ? dir : CHAN_DEFAULT_PIPE_DIR,
             CHAN_SOCKET_NAME);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        exit(2);
    }
    return s;
}

static int recv_welcome(int s, struct chan_welcome *w, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = w, .iov_len = sizeof(*w)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    *fd = -1;
    ssize_t n = recvmsg(s, &m, MSG_WAITALL);
    if (n != (ssize_t)sizeof(*w)) return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

static struct chan_hello hello(void)
{
    struct chan_hello h = {.head = {.magic = CHAN_MAGIC,
                                    .major = CHAN_PROTO_MAJOR,
                                    .minor = CHAN_PROTO_MINOR,
                                    .symbols_hash = SHIM_SYMBOLS_HASH,
                                    .pid = getpid(),
                                    .size = sizeof(struct chan_hello)}};
    snprintf(h.head.exe, sizeof(h.head.exe), "rawclient");
    return h;
}

static int version(void)
{
    int s = dial();
    struct chan_hello h = hello();
    h.head.major = 99;
    h.head.minor = 7;
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || recv_welcome(s, &w, &fd) != 0) {
        fprintf(stderr, "no welcome\n");
        return 1;
    }
    printf("%s\n", w.message);
    char mine[32], theirs[32];
    snprintf(mine, sizeof(mine), "client protocol 99.7");
    snprintf(theirs, sizeof(theirs), "server protocol %u.%u", CHAN_PROTO_MAJOR, CHAN_PROTO_MINOR);
    return w.status == CHAN_WELCOME_VERSION && fd < 0 && strstr(w.message, mine) &&
                   strstr(w.message, theirs)
               ? 0
               : 1;
}

static int garbage(void)
{
    int s = dial();
    struct chan_hello h = hello();
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || recv_welcome(s, &w, &fd) != 0 ||
        w.status != CHAN_WELCOME_OK || fd < 0) {
        fprintf(stderr, "handshake failed\n");
        return 1;
    }
    void *base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return 1;
    /* The segment is sealed: the client cannot shrink it under the server. */
    if (ftruncate(fd, 4096) == 0) {
        fprintf(stderr, "segment could be shrunk\n");
        return 1;
    }
    struct chan c;
    chan_attach(&c, base);
    struct chan_wait wt = {.spin_ns = 1000};
    /* 1: a record with an unknown operation; 2: a tail that jumps past the ring. */
    struct chan_rec *r = chan_ring_reserve(&c, 64, &wt);
    r->op = 0x7fff;
    chan_ring_publish(&c, r);
    atomic_store(&c.shm->tail, atomic_load(&c.shm->tail) + ((uint64_t)CHAN_RING_SIZE << 4));
    atomic_fetch_add(&c.shm->doorbell, 1);
    chan_futex_wake(&c.shm->doorbell);
    /* The server must hang up on us. */
    struct timeval tv = {.tv_sec = 10};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b;
    ssize_t n = recv(s, &b, 1, 0);
    printf("server %s\n", n == 0 ? "hung up" : "kept the connection");
    return n == 0 ? 0 : 1;
}

static int silent(void)
{
    int s = dial();
    struct timeval tv = {.tv_sec = 20};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b;
    ssize_t n = recv(s, &b, 1, 0);
    printf("server %s\n", n == 0 ? "hung up" : "kept the connection");
    return n == 0 ? 0 : 1;
}

static int trickle(void)
{
    int s = dial();
    struct chan_hello h = hello();
    const char *b = (const char *)&h;
    for (size_t i = 0; i < sizeof(h); i++) {
        if (send(s, b + i, 1, MSG_NOSIGNAL) != 1) break; /* hung up: what we want */
        struct timeval tv = {.tv_sec = 1};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char c;
        ssize_t n = recv(s, &c, 1, 0);
        if (n == 0) {
            printf("server hung up after %zu bytes of the hello\n", i + 1);
            return i + 1 < 15 ? 0 : 1; /* 5 s of time, one byte a second */
        }
    }
    printf("server kept the connection\n");
    return 1;
}

static int crowd(int n, int secs)
{
    int held = 0;
    for (int i = 0; i < n; i++) {
        const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir ? dir : CHAN_DEFAULT_PIPE_DIR,
                 CHAN_SOCKET_NAME);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        held += s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    }
    printf("holding %d silent connections\n", held);
    fflush(stdout);
    sleep((unsigned)secs);
    return 0;
}

/* ---------------------------------------------------------------- hostile */

static uint64_t give_up_at;
static int before_deadline(void *arg);

struct session {
    int sock;
    void *base;
    size_t size;
    struct chan c;
};

static int session_open_visible(struct session *x, const char *visible)
{
    x->sock = dial();
    struct chan_hello h = hello();
    if (visible) {
        h.visible_set = 1;
        snprintf(h.visible_devices, sizeof(h.visible_devices), "%s", visible);
    }
    struct chan_welcome w;
    int fd;
    if (send(x->sock, &h, sizeof(h), 0) != sizeof(h) || recv_welcome(x->sock, &w, &fd) != 0 ||
        w.status != CHAN_WELCOME_OK || fd < 0)
        return -1;
    x->size = w.shm_size;
    x->base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (x->base == MAP_FAILED) return -1;
    chan_attach(&x->c, x->base);
    return 0;
}

static int session_open(struct session *x)
{
    return session_open_visible(x, NULL);
}

/* One request on lane 0 with context 1, its reply's result (and data in out). */
static CUresult request(struct session *x, unsigned op, const void *payload, size_t len, void *out,
                        size_t cap)
{
    struct chan_wait wt = {.spin_ns = 1000, .alive = before_deadline};
    give_up_at = chan_now_ns() + 10000000000ull;
    struct chan_rec *r = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*r) + len), &wt);
    if (!r) return CUDA_ERROR_UNKNOWN;
    r->op = (uint16_t)op;
    r->flags = CHAN_RF_REPLY;
    r->lane = 0;
    r->thread = 1;
    r->ctx = 1;
    memcpy(r + 1, payload, len);
    uint32_t seq0 = atomic_load(&x->c.lanes[0].seq);
    chan_ring_publish(&x->c, r);
    if (chan_lane_wait(&x->c, 0, seq0, &wt) != 0)
        return CUDA_ERROR_UNKNOWN; /* no answer in 10 s: the server is gone or stuck */
    struct chan_lane *l = &x->c.lanes[0];
    if (out) memcpy(out, l->data, l->len < cap ? l->len : cap);
    return (CUresult)l->result;
}

/* A described call packed as the shim would, without the shim's own checks. */
static CUresult call(struct session *x, int id, const void *const *argv, void *out, size_t cap)
{
    uint8_t buf[4096];
    size_t rlen;
    CUresult err;
    size_t n = chan_pack_call(&shim_calls[id], argv, buf, sizeof(buf), &rlen, &err);
    if (err != CUDA_SUCCESS) return err;
    return request(x, (unsigned)id, buf, n, out, cap);
}

static int failures;
static void expect_refused(const char *what, CUresult r)
{
    printf("%-58s %s\n", what,
           r == CUDA_SUCCESS         ? "ACCEPTED"
           : r == CUDA_ERROR_UNKNOWN ? "NO ANSWER"
                                     : "refused");
    failures += r == CUDA_SUCCESS || r == CUDA_ERROR_UNKNOWN;
}

/* Loads managed.fatbin ($MPSSHIM_TEST_KERNELS) as a module of the session's context 1 and
 * looks its mv_arr up (1 KiB, a __managed__ variable); 0 when there is none. */
static CUdeviceptr managed_var(struct session *x)
{
    char path[512];
    const char *dir = getenv("MPSSHIM_TEST_KERNELS");
    snprintf(path, sizeof(path), "%s/managed.fatbin", dir ? dir : ".");
    FILE *f = fopen(path, "rb");
    static uint8_t img[1 << 20];
    size_t n = f ? fread(img, 1, sizeof(img), f) : 0;
    if (f) fclose(f);
    if (!n) return 0;
    struct chan_wait wt = {.spin_ns = 1000, .alive = before_deadline};
    const size_t max = CHAN_REC_MAX - sizeof(struct chan_rec);
    for (size_t off = 0; off < n; off += max) {
        size_t k = n - off < max ? n - off : max;
        give_up_at = chan_now_ns() + 10000000000ull;
        struct chan_rec *rec = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*rec) + k), &wt);
        if (!rec) return 0;
        rec->op = CHAN_OP_BLOB;
        rec->flags = 0;
        rec->ctx = 1;
        memcpy(rec + 1, img + off, k);
        chan_ring_publish(&x->c, rec);
    }
    struct chan_module_load ml = {.kind = CHAN_IMAGE_MODULE, .njit = 0, .image_size = n};
    struct chan_module_loaded got = {0};
    if (request(x, CHAN_OP_MODULE_LOAD, &ml, sizeof(ml), &got, sizeof(got)) != CUDA_SUCCESS)
        return 0;
    CUdeviceptr d = 0, *pd = &d;
    size_t bytes = 0, *pb = &bytes;
    CUmodule m = (CUmodule)(uintptr_t)got.handle;
    const char *name = "mv_arr";
    const void *a[] = {&pd, &pb, &m, &name};
    uint64_t out[2] = {0, 0}; /* the reply: the address, then the size */
    if (call(x, SHIM_ID_cuModuleGetGlobal_v2, a, out, sizeof(out)) != CUDA_SUCCESS ||
        out[1] != 1024)
        return 0;
    return out[0];
}

/* A CHAN_OP_MVAR request: what, n entries, then `data` bytes (zeros), buf. */
static CUresult mvar_request(struct session *x, uint32_t what, uint32_t n,
                             const struct chan_mvar_ent *e, size_t ents, size_t data, uint64_t buf)
{
    static uint8_t m[CHAN_REC_MAX];
    struct chan_mvar h = {.what = what, .n = n, .buf = buf};
    size_t len = sizeof(h) + ents * sizeof(*e) + data;
    if (len > sizeof(m) - sizeof(struct chan_rec)) return CUDA_ERROR_UNKNOWN;
    memset(m, 0, len);
    memcpy(m, &h, sizeof(h));
    memcpy(m + sizeof(h), e, ents * sizeof(*e));
    return request(x, CHAN_OP_MVAR, m, len, NULL, 0);
}

/* __managed__ variable transfers that name what the client may not. */
static void hostile_mvars(struct session *x, CUdeviceptr dev)
{
    struct session y;
    CUdeviceptr v = managed_var(x), theirs = 0;
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (session_open(&y) == 0 &&
        request(&y, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) == CUDA_SUCCESS)
        theirs = managed_var(&y);
    printf("%-58s %s\n", "a __managed__ variable of its own, and another's",
           v && theirs ? "ok" : "FAILED");
    failures += !v || !theirs;
    if (!v || !theirs) return;
    struct chan_mvar_ent e = {.dptr = v, .len = 16};
    CUresult r = mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0);
    printf("%-58s %s\n", "push of 16 bytes into its own variable",
           r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
    e.dptr = theirs;
    expect_refused("push into another client's variable",
                   mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    expect_refused("read of another client's variable",
                   mvar_request(x, CHAN_MVAR_READ, 1, &e, 1, 0, 0));
    e.dptr = dev;
    expect_refused("push into device memory of its own",
                   mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    e.dptr = v + 1020;
    expect_refused("push past the variable's end",
                   mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    e = (struct chan_mvar_ent){.dptr = v, .len = UINT64_MAX - 8};
    expect_refused("push whose length wraps", mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    e = (struct chan_mvar_ent){.dptr = v, .len = 32};
    expect_refused("push with fewer bytes than its entries say",
                   mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    expect_refused("push claiming 2^31 entries",
                   mvar_request(x, CHAN_MVAR_PUSH, 1u << 31, &e, 1, 16, 0));
    expect_refused("pull into device memory of its own",
                   mvar_request(x, CHAN_MVAR_PULL, 1, &e, 1, 0, dev));
    e.off = UINT64_MAX - 8;
    expect_refused("pull whose destination wraps",
                   mvar_request(x, CHAN_MVAR_PULL, 1, &e, 1, 0, dev));
    struct chan_mvar_ent many[80];
    for (int i = 0; i < 80; i++)
        many[i] = (struct chan_mvar_ent){.dptr = v, .len = 1024};
    expect_refused("read of more than a reply lane holds",
                   mvar_request(x, CHAN_MVAR_READ, 80, many, 80, 0, 0));
    /* Migrating managed memory's transfers (server/memory/migrate.c) name only that: one of
     * its own moves both ways; another client naming it, or past its end, is refused. */
    struct chan_host_alloc ha = {
        .bytes = 1u << 20, .flags = CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE | CU_MEM_ATTACH_GLOBAL};
    uint64_t rep[2] = {0, 0};
    r = request(x, CHAN_OP_HOST_ALLOC, &ha, sizeof(ha), rep, sizeof(rep));
    if (r == CUDA_SUCCESS) {
        uint8_t b;
        int fd = -1;
        if (chan_recv_fd(x->sock, &b, 1, &fd) >= 0 && fd >= 0) close(fd);
        e = (struct chan_mvar_ent){.dptr = rep[0] + 4096, .len = 65536};
        r = mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 0, 0);
        if (r == CUDA_SUCCESS)
            r = mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, CHAN_MPULL_AFTER_WORK);
    }
    printf("%-58s %s\n", "migrating managed memory of its own, pushed and pulled",
           r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
    expect_refused("migrating pull of another client's allocation",
                   mvar_request(&y, CHAN_MVAR_MPULL, 1, &e, 1, 0, 0));
    e = (struct chan_mvar_ent){.dptr = rep[0] + (1u << 20) - 8, .len = 16};
    expect_refused("migrating push past its allocation's end",
                   mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 0, 0));
    e = (struct chan_mvar_ent){.dptr = dev, .len = 16};
    expect_refused("migrating push into device memory",
                   mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 0, 0));
    expect_refused("migrating pull from device memory",
                   mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, CHAN_MPULL_AFTER_WORK));
    e.dptr = theirs;
    expect_refused("migrating pull from another client's variable",
                   mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, 0));
    expect_refused("migrating pull with unknown flags",
                   mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, 0x80));
    expect_refused("migrating push with bytes after it",
                   mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 16, 0));
    e = (struct chan_mvar_ent){.dptr = dev, .len = 16};
    expect_refused("info on device memory", mvar_request(x, CHAN_MVAR_INFO, 1, &e, 1, 0, 0));
    expect_refused("an unknown transfer", mvar_request(x, 99, 1, &e, 1, 0, 0));
    e = (struct chan_mvar_ent){.dptr = v, .len = 1024};
    r = mvar_request(x, CHAN_MVAR_READ, 1, &e, 1, 0, 0);
    printf("%-58s %s\n", "then a read of its own variable", r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
    munmap(y.base, y.size);
    close(y.sock);
}

/* COPY_BATCH records the shim would never send (server/memory/copybatch.c): each refused,
 * then a good one served. The batch: attrs, then copies, then `extra` staged bytes. */
static CUresult batch_request(struct session *x, uint64_t stream, uint32_t nattrs,
                              const CUmemcpyAttributes *a, uint32_t n,
                              const struct chan_batch_copy *m, size_t extra)
{
    static uint8_t buf[CHAN_REC_MAX];
    struct chan_copy_batch h = {.stream = stream, .count = n, .nattrs = nattrs};
    size_t len = sizeof(h), at = nattrs * sizeof(*a), cp = n * sizeof(*m);
    memcpy(buf, &h, len);
    memcpy(buf + len, a, at);
    memcpy(buf + len + at, m, cp);
    memset(buf + len + at + cp, 0, extra);
    return request(x, CHAN_OP_COPY_BATCH, buf, len + at + cp + extra, NULL, 0);
}

/* A COPY_BATCH3D record of n operations m on stream st, `extra` staged bytes of 0x5a
 * after them; the reply's first cap bytes into out. */
static CUresult batch3d_request(struct session *x, uint64_t st, const struct chan_batch_copy3d *m,
                                uint32_t n, size_t extra, void *out, size_t cap)
{
    static uint8_t buf[CHAN_REC_MAX];
    struct chan_copy_batch3d h = {.stream = st, .count = n};
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), m, n * sizeof(*m));
    memset(buf + sizeof(h) + n * sizeof(*m), 0x5a, extra);
    return request(x, CHAN_OP_COPY_BATCH3D, buf, sizeof(h) + n * sizeof(*m) + extra, out, cap);
}

/* 3D operations with staged (pageable) sides: their packed extents against the record's
 * bytes and the reply lane, overflow checked; then good ones both ways. m: a 16 x 3
 * operation between device sides at d (4 KiB). */
static void hostile_staged3d(struct session *x, struct chan_batch_copy3d m, uint64_t st,
                             CUdeviceptr d)
{
    struct chan_batch_copy3d many[17];
    uint8_t back[48];
    m.src.kind = m.dst.kind = CHAN_MEM_STAGED;
    expect_refused("3D batch, both sides staged", batch3d_request(x, st, &m, 1, 48, NULL, 0));
    m.dst.kind = CHAN_MEM_DEVICE;
    expect_refused("3D batch, staged 48 bytes in 16", batch3d_request(x, st, &m, 1, 16, NULL, 0));
    expect_refused("3D batch, staged 48 bytes in 64", batch3d_request(x, st, &m, 1, 64, NULL, 0));
    m.width = m.height = 1ull << 32;
    expect_refused("3D batch, staged 2^64 bytes", batch3d_request(x, st, &m, 1, 16, NULL, 0));
    m.width = 16;
    m.height = 3;
    m.src.kind = CHAN_MEM_DEVICE;
    expect_refused("3D batch, 16 staged bytes for no side",
                   batch3d_request(x, st, &m, 1, 16, NULL, 0));
    for (int i = 0; i < 17; i++) {
        many[i] = m;
        many[i].width = 4096;
        many[i].height = 1;
        many[i].dst.kind = CHAN_MEM_STAGED;
    }
    expect_refused("3D batch, staged destinations beyond the reply",
                   batch3d_request(x, st, many, 17, 0, NULL, 0));
    m.src.kind = CHAN_MEM_STAGED;
    m.dst.addr = d + 2048;
    CUresult r = batch3d_request(x, st, &m, 1, 48, NULL, 0);
    m.src = m.dst;
    m.dst.kind = CHAN_MEM_STAGED;
    memset(back, 0, sizeof(back));
    if (r == CUDA_SUCCESS) r = batch3d_request(x, st, &m, 1, 0, back, sizeof(back));
    for (size_t i = 0; r == CUDA_SUCCESS && i < sizeof(back); i++)
        if (back[i] != 0x5a) r = CUDA_ERROR_UNKNOWN;
    printf("%-58s %s\n", "then staged 3D sides both ways", r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
}

static void hostile_batches(struct session *x, CUdeviceptr d)
{
    struct chan_stream_create sc = {0};
    uint64_t st = 0;
    if (request(x, CHAN_OP_STREAM_CREATE, &sc, sizeof(sc), &st, sizeof(st)) != CUDA_SUCCESS) {
        printf("no stream\n");
        failures++;
        return;
    }
    CUmemcpyAttributes a[2];
    memset(a, 0, sizeof(a));
    a[0].srcAccessOrder = a[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    const uint32_t D = CHAN_MEM_DEVICE, S = CHAN_MEM_STAGED;
    struct chan_batch_copy m[2] = {{d + 2048, d, 16, D, D, 0, 0}, {d, d + 1024, 16, D, D, 0, 0}};
    expect_refused("batch, 2 attributes for 1 copy", batch_request(x, st, 2, a, 1, m, 0));
    m[0].attr = 1;
    expect_refused("batch, attribute 1 of 1", batch_request(x, st, 1, a, 1, m, 0));
    m[0].attr = 0;
    m[0].dst_kind = 7;
    expect_refused("batch, a side of kind 7", batch_request(x, st, 1, a, 1, m, 0));
    m[0].src_kind = m[0].dst_kind = S;
    expect_refused("batch, both sides staged", batch_request(x, st, 1, a, 1, m, 16));
    m[0] = (struct chan_batch_copy){d + 4000, d, 200, D, D, 0, 0};
    expect_refused("batch, 200 bytes at 4000 of 4 KiB", batch_request(x, st, 1, a, 1, m, 0));
    m[0] = (struct chan_batch_copy){d, 0, UINT64_MAX, D, S, 0, 0};
    m[1] = (struct chan_batch_copy){d + 16, 0, 17, D, S, 0, 0};
    expect_refused("batch, staged 2^64 - 1 + 17 bytes in 16", batch_request(x, st, 1, a, 2, m, 16));
    m[0].bytes = 8;
    expect_refused("batch, staged 8 + 17 bytes in 32", batch_request(x, st, 1, a, 2, m, 32));
    m[0] = (struct chan_batch_copy){0, d, 4096, S, D, 0, 0};
    m[1] = (struct chan_batch_copy){0, d, CHAN_LANE_DATA, S, D, 0, 0};
    expect_refused("batch, staged destinations beyond the reply",
                   batch_request(x, st, 1, a, 2, m, 0));
    m[0] = (struct chan_batch_copy){d + 2048, d, 0, D, D, 0, 0};
    expect_refused("batch, a copy of 0 bytes", batch_request(x, st, 1, a, 1, m, 0));
    m[0].bytes = 16;
    a[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
    expect_refused("batch, source access order INVALID", batch_request(x, st, 1, a, 1, m, 0));
    a[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    expect_refused("batch, on the legacy NULL stream", batch_request(x, 0, 1, a, 1, m, 0));
    CUresult r = batch_request(x, st, 1, a, 1, m, 0);
    printf("%-58s %s\n", "then a good batch", r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
    /* 3D: each operation's sides as a single copy's. */
    struct {
        struct chan_copy_batch3d h;
        struct chan_batch_copy3d m;
    } b = {{.stream = st, .count = 1}, {.width = 16, .height = 3, .depth = 1, .order = 1}};
    b.m.src = b.m.dst = (struct chan_copy_side){.kind = D, .device = -1, .addr = d, .pitch = 16};
    b.m.src.pitch = 0xfffffffffffffff8ull;
    expect_refused("3D batch, 3 rows of pitch 0xfffffffffffffff8",
                   request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0));
    b.m.src.pitch = 16;
    b.m.dst.kind = CHAN_MEM_ARRAY;
    b.m.dst.addr = 0x1234;
    expect_refused("3D batch, an array not its own",
                   request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0));
    hostile_staged3d(x, b.m, st, d);
    b.m.dst.kind = D;
    b.m.order = 0;
    expect_refused("3D batch, source access order INVALID",
                   request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0));
    b.m.order = 1;
    b.m.dst.addr = d + 1024;
    r = request(x, CHAN_OP_COPY_BATCH3D, &b, sizeof(b), NULL, 0);
    printf("%-58s %s\n", "then a good 3D batch", r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
}

static int hostile(void)
{
    struct session x;
    if (session_open(&x) != 0) {
        fprintf(stderr, "no session\n");
        return 1;
    }
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    /* 4 KiB of its own. */
    CUdeviceptr d = 0, *pd = &d;
    size_t bytes = 4096;
    const void *aa[] = {&pd, &bytes};
    CUresult r = call(&x, SHIM_ID_cuMemAlloc_v2, aa, &d, sizeof(d));
    if (r != CUDA_SUCCESS || !d) {
        fprintf(stderr, "cuMemAlloc_v2: %d\n", (int)r);
        return 1;
    }
    CUstream st = NULL;
    unsigned ui = 0;
    size_t n62 = (size_t)1 << 62, one = 1, huge_pitch = 0xfffffffffffffff8ull, w = 16;
    {
        const void *a[] = {&d, &ui, &n62, &st};
        expect_refused("cuMemsetD32Async, N = 2^62 elements",
                       call(&x, SHIM_ID_cuMemsetD32Async, a, NULL, 0));
        const void *b[] = {&d, &ui, &n62};
        expect_refused("cuMemsetD32_v2, N = 2^62 elements",
                       call(&x, SHIM_ID_cuMemsetD32_v2, b, NULL, 0));
    }
    {
        size_t h = 3;
        unsigned char uc = 0;
        const void *a[] = {&d, &huge_pitch, &uc, &w, &h};
        expect_refused("cuMemsetD2D8_v2, pitch 0xfffffffffffffff8",
                       call(&x, SHIM_ID_cuMemsetD2D8_v2, a, NULL, 0));
        size_t p2 = 4096, h2 = 1000;
        const void *b[] = {&d, &p2, &uc, &w, &h2};
        expect_refused("cuMemsetD2D8_v2, 1000 rows of 4 KiB in 4 KiB",
                       call(&x, SHIM_ID_cuMemsetD2D8_v2, b, NULL, 0));
        (void)one;
    }
    {
        /* Copies: the copy op's own record, sides far beyond the allocation or wrapping. */
        struct chan_copy m;
        memset(&m, 0, sizeof(m));
        m.src.kind = m.dst.kind = CHAN_MEM_DEVICE;
        m.src.device = m.dst.device = -1;
        m.src.addr = m.dst.addr = d;
        m.width = 16;
        m.height = 3;
        m.depth = 1;
        m.src.pitch = m.dst.pitch = huge_pitch;
        expect_refused("copy, 3 rows of pitch 0xfffffffffffffff8",
                       request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
        m.src.pitch = m.dst.pitch = 4096;
        m.height = 2;
        expect_refused("copy, 2 rows of 4 KiB from a 4 KiB allocation",
                       request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
        m.height = 1;
        m.width = (uint64_t)1 << 63;
        m.depth = 4;
        expect_refused("copy, 2^63 bytes x 4 slices",
                       request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
        m.width = 16;
        m.depth = 1;
        m.src.x = UINT64_MAX - 8;
        expect_refused("copy, source offset 2^64 - 9",
                       request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
    }
    {
        /* An ELF whose section table's end wraps 64 bits: uploaded, then loaded. */
        uint8_t img[256];
        memset(img, 0, sizeof(img));
        memcpy(img,
               "\x7f"
               "ELF",
               4);
        img[4] = 2; /* ELFCLASS64 */
        uint64_t shoff = UINT64_MAX - 63;
        uint16_t shentsize = 64, shnum = 2;
        memcpy(img + 0x28, &shoff, 8);
        memcpy(img + 0x3a, &shentsize, 2);
        memcpy(img + 0x3c, &shnum, 2);
        struct chan_rec *rec;
        struct chan_wait wt = {.spin_ns = 1000, .alive = before_deadline};
        give_up_at = chan_now_ns() + 10000000000ull;
        rec = chan_ring_reserve(&x.c, (uint32_t)(sizeof(*rec) + sizeof(img)), &wt);
        if (rec) {
            rec->op = CHAN_OP_BLOB;
            rec->flags = 0;
            rec->ctx = 1;
            memcpy(rec + 1, img, sizeof(img));
            chan_ring_publish(&x.c, rec);
        }
        struct chan_module_load ml = {
            .kind = CHAN_IMAGE_MODULE, .njit = 0, .image_size = sizeof(img)};
        expect_refused("module image whose section table wraps 64 bits",
                       request(&x, CHAN_OP_MODULE_LOAD, &ml, sizeof(ml), NULL, 0));
    }
    {
        /* The cuGetProcAddress table: read from past its end, or with a short request. */
        uint32_t off = 0xffffff00u;
        expect_refused("procaddr table from offset 0xffffff00",
                       request(&x, CHAN_OP_PROCADDR, &off, sizeof(off), NULL, 0));
        uint16_t half = 0;
        expect_refused("procaddr table, a 2-byte request",
                       request(&x, CHAN_OP_PROCADDR, &half, sizeof(half), NULL, 0));
        struct chan_procaddr_page pg = {0};
        off = 0;
        r = request(&x, CHAN_OP_PROCADDR, &off, sizeof(off), &pg, sizeof(pg));
        printf("%-58s %s\n", "procaddr table from offset 0",
               r == CUDA_SUCCESS && pg.total ? "ok" : "FAILED");
        failures += r != CUDA_SUCCESS || !pg.total;
    }
    hostile_mvars(&x, d);
    hostile_batches(&x, d);
    /* Still serving: its own memory is still there to free. */
    const void *fa[] = {&d};
    r = call(&x, SHIM_ID_cuMemFree_v2, fa, NULL, 0);
    printf("%-58s %s\n", "then cuMemFree_v2 of its own memory",
           r == CUDA_SUCCESS ? "ok" : "FAILED");
    failures += r != CUDA_SUCCESS;
    munmap(x.base, x.size);
    close(x.sock);
    return failures ? 1 : 0;
}

/* Sends a payload of len bytes of op: 1 when the answer is `answer` (0: the client is
 * disconnected, a protocol error; on a session of its own, which goes). */
static int answered(struct session *x, const char *name, unsigned op, CUresult answer,
                    const void *payload, size_t len, const char *how)
{
    struct session y;
    CUresult got = answer                  ? request(x, op, payload, len, NULL, 0)
                   : session_open(&y) != 0 ? CUDA_SUCCESS
                                           : request(&y, op, payload, len, NULL, 0);
    /* CUDA_ERROR_UNKNOWN: no answer, the server let the client go. */
    CUresult want = answer ? answer : CUDA_ERROR_UNKNOWN;
    printf("%-24s %-28s %zu bytes: %d (want %d)\n", name, how, len, (int)got, (int)want);
    return got == want;
}

/* A payload's checked members (CHAN_OP_CHECKED, from its %payload line), each alone made a
 * lie in a payload whose other members pass: a range's member one past either end, a
 * trailing part's count one more than the record holds and the largest its member holds. */
struct checked {
    unsigned op;
    const char *member;
    size_t size;       /* the fixed part */
    size_t off, width; /* the member */
    uint64_t lo, hi;   /* a range; else elem is the trailing element's size */
    size_t elem;
};

static const struct checked checks[] = {
#define X(op, type, m, l, h)                                                                       \
    {op, #m, sizeof(type), offsetof(type, m), sizeof(((type *)0)->m), (l), (h), 0},
#define Y(op, type, m, size)                                                                       \
    {op, #m, sizeof(type), offsetof(type, m), sizeof(((type *)0)->m), 0, 0, (size)},
    CHAN_OP_CHECKED(X, Y)
#undef X
#undef Y
};

static void put(uint8_t *p, const struct checked *k, uint64_t v)
{
    memcpy(p + k->off, &v, k->width); /* little-endian: the low bytes */
}

/* A payload of op whose checked members all pass, in buf: its length. */
static size_t passing(unsigned op, uint8_t *buf)
{
    size_t len = 0;
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        const struct checked *k = &checks[i];
        if (k->op != op) continue;
        if (!len) len = k->size;
        if (!k->elem) {
            put(buf, k, k->lo);
            continue;
        }
        uint64_t n = 0;
        memcpy(&n, buf + k->off, k->width);
        len += n * k->elem; /* zeros: a string of n > 0 bytes ends in its NUL */
    }
    return len;
}

static int lies(struct session *x, const char *name, unsigned op, CUresult answer, int *n)
{
    static uint8_t buf[8192];
    int bad = 0;
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        const struct checked *k = &checks[i];
        if (k->op != op) continue;
        memset(buf, 0, sizeof(buf));
        size_t len = passing(op, buf);
        uint64_t top = k->width == 8 ? UINT64_MAX : (1ull << (8 * k->width)) - 1, had = 0, v[2];
        int nv = 0;
        memcpy(&had, buf + k->off, k->width);
        if (k->elem) {
            v[nv++] = had + 1;
            v[nv++] = top;
        } else {
            if (k->lo > 0) v[nv++] = k->lo - 1;
            if (k->hi < top) v[nv++] = k->hi + 1;
        }
        for (int j = 0; j < nv; j++, (*n)++) {
            char how[64];
            put(buf, k, v[j]);
            snprintf(how, sizeof(how), "%s = %llu", k->member, (unsigned long long)v[j]);
            bad += !answered(x, name, op, answer, buf, len, how);
        }
    }
    return bad;
}

/* Every operation with a payload row (CHAN_OP_PAYLOADS, generated from the %op rows of
 * cuda_symbols.txt) sent one byte short, and one byte long where the row says its size
 * exactly, then with each member its %payload line checks made a lie: each gets the answer
 * its row names, before its handler runs, and a row whose answer is a protocol error (0) has
 * its client disconnected. */
static int payloads(void)
{
    struct session x;
    struct chan_ctx cx = {.id = 1, .device = 0};
    if (session_open(&x) != 0 ||
        request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
        printf("no session\n");
        return 1;
    }
    static const struct {
        const char *name;
        unsigned op;
        size_t size;
        int exact;
        CUresult answer;
    } rows[] = {
#define ROW(op, type, exact, answer) {#op, op, sizeof(type), exact, answer},
        CHAN_OP_PAYLOADS(ROW)
#undef ROW
    };
    static uint8_t zeros[4096];
    int bad = 0, n = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int more = 0; more <= rows[i].exact; more++, n++) {
            size_t len = more ? rows[i].size + 1 : rows[i].size - 1;
            bad += !answered(&x, rows[i].name, rows[i].op, rows[i].answer, zeros, len,
                             more ? "one byte long" : "one byte short");
        }
        bad += lies(&x, rows[i].name, rows[i].op, rows[i].answer, &n);
    }
    printf("%d payloads, %d answered otherwise\n", n, bad);
    return bad != 0 || n == 0;
}

static _Atomic int scribbling;
struct scribble_arg {
    volatile uint8_t *lane;
    uint64_t value;
};

static void *scribbler(void *p)
{
    struct scribble_arg *a = p;
    while (atomic_load(&scribbling))
        for (int i = 0; i < 8; i++)
            memcpy((uint8_t *)a->lane + i * 8, &a->value, 8);
    return NULL;
}

static int scribble(void)
{
    struct session victim, thief;
    if (session_open(&victim) != 0 || session_open(&thief) != 0) return 1;
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (request(&victim, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS ||
        request(&thief, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS)
        return 1;
    CUDA_ARRAY_DESCRIPTOR desc = {
        .Width = 64, .Height = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CUarray theirs = NULL, mine = NULL, *pa = &theirs;
    const CUDA_ARRAY_DESCRIPTOR *pd = &desc;
    const void *ca[] = {&pa, &pd};
    if (call(&victim, SHIM_ID_cuArrayCreate_v2, ca, &theirs, sizeof(theirs)) != CUDA_SUCCESS ||
        !theirs) {
        fprintf(stderr, "the victim has no array\n");
        return 1;
    }
    struct scribble_arg arg = {.lane = thief.c.lanes[0].data, .value = (uint64_t)(uintptr_t)theirs};
    pthread_t t;
    atomic_store(&scribbling, 1);
    pthread_create(&t, NULL, scribbler, &arg);
    int stolen = 0, made = 0;
    for (int i = 0; i < 500 && !stolen; i++) {
        pa = &mine;
        CUresult r = call(&thief, SHIM_ID_cuArrayCreate_v2, ca, NULL, 0);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "the thief's cuArrayCreate_v2 failed: %d\n", (int)r);
            break;
        }
        made++;
        const void *da[] = {&theirs};
        stolen = call(&thief, SHIM_ID_cuArrayDestroy, da, NULL, 0) == CUDA_SUCCESS;
    }
    printf("%d arrays made under a scribbled lane\n", made);
    atomic_store(&scribbling, 0);
    pthread_join(t, NULL);
    const void *da[] = {&theirs};
    CUresult still = call(&victim, SHIM_ID_cuArrayDestroy, da, NULL, 0);
    printf("the other client's array %s; it destroys it itself: %s\n",
           stolen ? "was destroyed by the thief" : "stayed out of reach",
           still == CUDA_SUCCESS ? "ok" : "FAILED");
    return !stolen && made == 500 && still == CUDA_SUCCESS ? 0 : 1;
}

/* Gives up waiting for ring space after a deadline: a fuzzed record may have parked the
 * server's worker on a staging wait that this client never feeds. */
static uint64_t give_up_at;
static int before_deadline(void *arg)
{
    (void)arg;
    return chan_now_ns() < give_up_at;
}

static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* One session: handshake, a context, then random records until `left` runs out or the
 * server hangs up. Returns the records sent. */
static long fuzz_session(long left)
{
    int s = dial();
    struct chan_hello h = hello();
    struct chan_welcome w;
    int fd;
    if (send(s, &h, sizeof(h), 0) != sizeof(h) || recv_welcome(s, &w, &fd) != 0 ||
        w.status != CHAN_WELCOME_OK || fd < 0) {
        close(s);
        return -1;
    }
    void *base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        close(s);
        return -1;
    }
    struct chan c;
    chan_attach(&c, base);
    struct chan_wait wt = {.spin_ns = 1000, .alive = before_deadline};
    give_up_at = chan_now_ns() + 2000000000ull;
    long sent = 0;
    /* A context, so that handlers get past their first check. */
    struct chan_rec *r = chan_ring_reserve(&c, sizeof(*r) + sizeof(struct chan_ctx), &wt);
    if (r) {
        struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
        r->op = CHAN_OP_CTX_CREATE;
        memcpy(r + 1, &cx, sizeof(cx));
        chan_ring_publish(&c, r);
    }
    while (sent < left) {
        char b;
        ssize_t n = recv(s, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) break; /* the server dropped us */
        uint32_t len = (uint32_t)(rnd() % 512);
        if (rnd() % 8 == 0) len = (uint32_t)(rnd() % (CHAN_REC_MAX - sizeof(*r)));
        r = chan_ring_reserve(&c, (uint32_t)sizeof(*r) + len, &wt);
        if (!r) break;
        uint64_t pick = rnd();
        r->op = pick % 3 == 0
                    ? (uint16_t)(rnd() % SHIM_NCALLS)
                    : (uint16_t)(CHAN_OP_BASE + 1 + rnd() % (CHAN_OP_END - CHAN_OP_BASE - 1));
        r->flags = (uint16_t)(rnd() % 4);
        r->lane = (uint16_t)(rnd() % (CHAN_NLANES + 2));
        r->thread = (uint16_t)(rnd() % 4);
        r->ctx = rnd() % 4 == 0 ? (uint32_t)rnd() : 1;
        uint8_t *p = (uint8_t *)(r + 1);
        for (uint32_t k = 0; k < len; k++)
            p[k] = (uint8_t)rnd();
        /* Sometimes small integers, which pass more length and range checks. */
        if (rnd() % 2)
            for (uint32_t k = 0; k + 8 <= len; k += 8) {
                uint64_t v = rnd() % 64;
                memcpy(p + k, &v, 8);
            }
        chan_ring_publish(&c, r);
        sent++;
    }
    munmap(base, w.shm_size);
    close(s);
    return sent;
}

static int fuzz(uint64_t seed, long n)
{
    rnd_state = seed ? seed : 1;
    long total = 0;
    int sessions = 0;
    while (total < n) {
        long k = fuzz_session(n - total);
        if (k < 0) {
            fprintf(stderr, "the server refused a session after %ld records: it died?\n", total);
            return 1;
        }
        total += k > 0 ? k : 1;
        sessions++;
    }
    printf("%ld random records in %d sessions\n", total, sessions);
    return 0;
}

/* ---------------------------------------------------------------- shrink */

/* cuMemHostRegister as the shim sends it: fd on the socket, then the record naming the
 * pages [addr, addr + bytes), which the server maps from fd at the same address. */
static CUresult register_fd(struct session *x, int fd, uint64_t addr, uint64_t bytes)
{
    uint8_t one = 1;
    if (chan_send_fd(x->sock, &one, 1, fd) != 0) return CUDA_ERROR_UNKNOWN;
    struct chan_host_register m = {.what = CHAN_HR_REGISTER,
                                   .flags =
                                       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP,
                                   .addr = addr,
                                   .bytes = bytes};
    return request(x, CHAN_OP_HOST_REGISTER, &m, sizeof(m), NULL, 0);
}

/* A file of `bytes` on disk (or wherever the pipe directory is): unlinked, never sealable. */
static int disk_file(uint64_t bytes)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    int fd = open(dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/rawclient-XXXXXX", dir ? dir : "/tmp");
        if ((fd = mkstemp(path)) >= 0) unlink(path);
    }
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A memfd of `bytes` with `seals` added (none: made without MFD_ALLOW_SEALING). */
static int memfd(const char *name, uint64_t bytes, int seals)
{
    int fd = memfd_create(name, MFD_CLOEXEC | (seals ? MFD_ALLOW_SEALING : 0));
    if (fd >= 0 &&
        (ftruncate(fd, (off_t)bytes) != 0 || (seals && fcntl(fd, F_ADD_SEALS, seals) != 0))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* ---------------------------------------------------------------- accounts */

static void expect(const char *what, CUresult got, CUresult want);

static CUresult acct_alloc(struct session *x, size_t bytes, CUdeviceptr *d)
{
    CUdeviceptr *pd = d;
    const void *a[] = {&pd, &bytes};
    return call(x, SHIM_ID_cuMemAlloc_v2, a, d, sizeof(*d));
}

static CUresult acct_pinned(struct session *x, uint64_t bytes)
{
    struct chan_host_alloc m = {.bytes = bytes};
    uint64_t rep[2];
    CUresult r = request(x, CHAN_OP_HOST_ALLOC, &m, sizeof(m), rep, sizeof(rep));
    if (r == CUDA_SUCCESS) { /* its memfd came on the socket first: taken, unused */
        uint8_t b;
        int fd = -1;
        if (chan_recv_fd(x->sock, &b, 1, &fd) >= 0 && fd >= 0) close(fd);
    }
    return r;
}

static int accounts(void)
{
    struct session x[9];
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    for (int i = 0; i < 3; i++) {
        x[i].sock = dial();
        struct chan_hello h = hello();
        snprintf(h.pinned_mem_limit, sizeof(h.pinned_mem_limit), "0=4M");
        struct chan_welcome w;
        int fd;
        if (send(x[i].sock, &h, sizeof(h), 0) != sizeof(h) ||
            recv_welcome(x[i].sock, &w, &fd) != 0 || w.status != CHAN_WELCOME_OK || fd < 0) {
            fprintf(stderr, "connection %d refused\n", i);
            return 1;
        }
        x[i].size = w.shm_size;
        x[i].base = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (x[i].base == MAP_FAILED) return 1;
        chan_attach(&x[i].c, x[i].base);
        if (request(&x[i], CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
            fprintf(stderr, "no context in connection %d\n", i);
            return 1;
        }
    }
    CUdeviceptr d;
    expect("3 MiB in connection 1 (limit 4M)", acct_alloc(&x[0], 3u << 20, &d), CUDA_SUCCESS);
    expect("3 MiB more in connection 2", acct_alloc(&x[1], 3u << 20, &d), CUDA_ERROR_OUT_OF_MEMORY);
    expect("1 MiB in connection 3", acct_alloc(&x[2], 1u << 20, &d), CUDA_SUCCESS);
    expect("1 byte more in connection 2", acct_alloc(&x[1], 1, &d), CUDA_ERROR_OUT_OF_MEMORY);
    /* Pinned memory is mapped in 2 MiB steps. */
    expect("2 MiB pinned in connection 1 (cap 4 MiB)", acct_pinned(&x[0], 2u << 20), CUDA_SUCCESS);
    expect("4 MiB pinned more in connection 2", acct_pinned(&x[1], 4u << 20),
           CUDA_ERROR_OUT_OF_MEMORY);
    expect("2 MiB pinned in connection 3", acct_pinned(&x[2], 2u << 20), CUDA_SUCCESS);
    expect("1 byte pinned more in connection 2", acct_pinned(&x[1], 1), CUDA_ERROR_OUT_OF_MEMORY);
    /* Records: events until the cap, from the three connections in turn. */
    unsigned made = 0;
    CUevent last = NULL;
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < 1000 && r == CUDA_SUCCESS; i++) {
        CUevent e = NULL, *pe = &e;
        unsigned fl = 0;
        const void *a[] = {&pe, &fl};
        r = call(&x[i % 3], SHIM_ID_cuEventCreate, a, &e, sizeof(e));
        if (r == CUDA_SUCCESS) {
            made++;
            last = e;
        }
    }
    printf("%-58s %u made, then %d\n", "events across 3 connections (cap 300 records)", made,
           (int)r);
    failures += !(made > 200 && made < 300 && r == CUDA_ERROR_OUT_OF_MEMORY);
    {
        int who = (int)((made - 1) % 3);
        const void *a[] = {&last};
        expect("one destroyed", call(&x[who], SHIM_ID_cuEventDestroy_v2, a, NULL, 0), CUDA_SUCCESS);
        CUevent e = NULL, *pe = &e;
        unsigned fl = 0;
        const void *b[] = {&pe, &fl};
        expect("then one more made", call(&x[0], SHIM_ID_cuEventCreate, b, &e, sizeof(e)),
               CUDA_SUCCESS);
        expect("and no further one", call(&x[1], SHIM_ID_cuEventCreate, b, &e, sizeof(e)),
               CUDA_ERROR_OUT_OF_MEMORY);
    }
    /* Connections: 8 at once at most. */
    int open_ok = 3;
    for (int i = 3; i < 9; i++) {
        x[i].sock = dial();
        struct chan_hello h = hello();
        struct chan_welcome w;
        int fd = -1;
        int ok = send(x[i].sock, &h, sizeof(h), 0) == sizeof(h) &&
                 recv_welcome(x[i].sock, &w, &fd) == 0 && w.status == CHAN_WELCOME_OK;
        if (fd >= 0) close(fd);
        open_ok += ok;
    }
    printf("%-58s %d\n", "connections of one process taken (of 9)", open_ok);
    failures += open_ok != 8;
    printf("%s\n", failures ? "FAIL accounts" : "PASS accounts");
    return failures != 0;
}

static int shrink(void)
{
    struct session x;
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (session_open(&x) != 0 ||
        request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "no session\n");
        return 1;
    }
    const uint64_t bytes = 64 << 10;
    struct {
        const char *what;
        int fd, want_taken, taken;
    } v[] = {
        {"an unsealed memfd", memfd("rawclient-unsealed", bytes, 0), 0, 0},
        {"a file", disk_file(bytes), 0, 0},
        {"a memfd sealed against growing only", memfd("rawclient-grow", bytes, F_SEAL_GROW), 0, 0},
        {"a memfd sealed against shrinking",
         memfd("rawclient-sealed", bytes, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 1, 0},
    };
    const int n = (int)(sizeof(v) / sizeof(v[0]));
    for (int i = 0; i < n; i++) {
        /* An address of this process's own, as the shim's would be (its pages stay here). */
        void *at = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (v[i].fd < 0 || at == MAP_FAILED) {
            fprintf(stderr, "cannot make %s: %s\n", v[i].what, strerror(errno));
            return 1;
        }
        char what[96];
        snprintf(what, sizeof(what), "cuMemHostRegister of %s", v[i].what);
        CUresult r = register_fd(&x, v[i].fd, (uint64_t)(uintptr_t)at, bytes);
        if (v[i].want_taken) {
            printf("%-58s %s\n", what, r == CUDA_SUCCESS ? "taken" : shim_error_name(r));
            failures += r != CUDA_SUCCESS;
        } else {
            expect_refused(what, r);
        }
        if (r != CUDA_SUCCESS) continue;
        v[i].taken = 1;
        /* Its stream waits on the first word: the server ends that wait with a store when
         * this client leaves (memops.c), and the CPU test driver polls the word till then. */
        CUstream st = NULL;
        CUdeviceptr a = (CUdeviceptr)(uintptr_t)at;
        cuuint32_t one = 1;
        unsigned eq = CU_STREAM_WAIT_VALUE_EQ;
        const void *wa[] = {&st, &a, &one, &eq};
        r = call(&x, SHIM_ID_cuStreamWaitValue32_v2, wa, NULL, 0);
        printf("%-58s %s\n", "  a stream waits on its first word",
               r == CUDA_SUCCESS ? "ok" : shim_error_name(r));
        failures += r != CUDA_SUCCESS;
    }
    for (int i = 0; i < n; i++) {
        if (!v[i].taken) continue;
        char what[96];
        snprintf(what, sizeof(what), "then shrinking %s to 0", v[i].what);
        int shrunk = ftruncate(v[i].fd, 0) == 0;
        printf("%-58s %s\n", what, shrunk ? "SHRUNK" : strerror(errno));
        failures += shrunk;
        /* A hole is allowed (only F_SEAL_WRITE forbids it, and the client's own writes with
         * it): the server's next touch of those pages finds new zeroed ones. */
        snprintf(what, sizeof(what), "then punching a hole in %s", v[i].what);
        int punched =
            fallocate(v[i].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0;
        printf("%-58s %s\n", what, punched ? "punched" : strerror(errno));
    }
    /* Leaves with the waits pending: the server stores into those pages as it lets them go. */
    close(x.sock);
    printf("left with its streams waiting\n");
    return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- devices */

static void expect(const char *what, CUresult got, CUresult want)
{
    printf("%-58s %s\n", what, got == want ? "as expected" : shim_error_name(got));
    failures += got != want;
}

/* Given only the server's device 1 (CUDA_VISIBLE_DEVICES=1), it forges device 1 (its own
 * ordinals have 0 alone) in every place a device travels; the server must refuse each,
 * and map its device 0 to the server's 1. */
static int devices(void)
{
    struct session x;
    if (session_open_visible(&x, "1") != 0) {
        fprintf(stderr, "no session\n");
        return 1;
    }
    const struct chan_devinfo *di = x.c.devinfo;
    printf("devinfo: %d device(s), device 0 uuid ends %02x\n", di->ndev,
           (unsigned char)di->dev[0].uuid.bytes[15]);
    failures += di->ndev != 1 || di->dev[0].uuid.bytes[15] != 1;
    struct chan_ctx cx = {.id = 1, .device = 1, .primary = 1};
    expect("context on device 1", request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0),
           CUDA_ERROR_INVALID_DEVICE);
    cx.device = -1;
    expect("context on device -1", request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0),
           CUDA_ERROR_INVALID_DEVICE);
    cx.device = 0;
    expect("context on device 0", request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0),
           CUDA_SUCCESS);
    CUdevice d0 = 0, d1 = 1;
    int ok = 0, *pok = &ok;
    const void *peer[] = {&pok, &d0, &d1};
    expect("cuDeviceCanAccessPeer(0, 1)", call(&x, SHIM_ID_cuDeviceCanAccessPeer, peer, NULL, 0),
           CUDA_ERROR_INVALID_DEVICE);
    CUmemoryPool pool = 0, *pp = &pool;
    const void *dp1[] = {&pp, &d1};
    expect("cuDeviceGetDefaultMemPool(1)",
           call(&x, SHIM_ID_cuDeviceGetDefaultMemPool, dp1, NULL, 0), CUDA_ERROR_INVALID_DEVICE);
    size_t gran = 0, *pg = &gran;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1}};
    const CUmemAllocationProp *pprop = &prop;
    CUmemAllocationGranularity_flags gf = CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    const void *ga[] = {&pg, &pprop, &gf};
    expect("cuMemGetAllocationGranularity, location device 1",
           call(&x, SHIM_ID_cuMemGetAllocationGranularity, ga, NULL, 0), CUDA_ERROR_INVALID_DEVICE);
    prop.location.id = 0;
    expect("cuMemGetAllocationGranularity, location device 0",
           call(&x, SHIM_ID_cuMemGetAllocationGranularity, ga, NULL, 0), CUDA_SUCCESS);
    CUstream st = NULL;
    CUdevice got = -5, *pgot = &got;
    const void *sg[] = {&st, &pgot};
    expect("cuStreamGetDevice(NULL)", call(&x, SHIM_ID_cuStreamGetDevice, sg, &got, sizeof(got)),
           CUDA_SUCCESS);
    printf("cuStreamGetDevice says device %d (its own numbering)\n", (int)got);
    failures += got != 0;
    CUdeviceptr dptr = 0, *pd = &dptr;
    size_t bytes = 4096;
    const void *aa[] = {&pd, &bytes};
    expect("cuMemAlloc_v2 (lands on the server's device 1)",
           call(&x, SHIM_ID_cuMemAlloc_v2, aa, &dptr, sizeof(dptr)), CUDA_SUCCESS);
    struct chan_copy m;
    memset(&m, 0, sizeof(m));
    m.src.kind = m.dst.kind = CHAN_MEM_DEVICE;
    m.src.device = 1;
    m.dst.device = 0;
    m.src.addr = m.dst.addr = dptr;
    m.width = 16;
    m.height = m.depth = 1;
    m.flags = CHAN_CF_PEER;
    expect("peer copy from device 1", request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0),
           CUDA_ERROR_INVALID_DEVICE);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "devices") == 0) return devices();
    if (argc == 4 && strcmp(argv[1], "fuzz") == 0)
        return fuzz(strtoull(argv[2], NULL, 10), atol(argv[3]));
    if (argc == 2 && strcmp(argv[1], "version") == 0) return version();
    if (argc == 2 && strcmp(argv[1], "garbage") == 0) return garbage();
    if (argc == 2 && strcmp(argv[1], "silent") == 0) return silent();
    if (argc == 2 && strcmp(argv[1], "hostile") == 0) return hostile();
    if (argc == 2 && strcmp(argv[1], "scribble") == 0) return scribble();
    if (argc == 2 && strcmp(argv[1], "payloads") == 0) return payloads();
    if (argc == 2 && strcmp(argv[1], "trickle") == 0) return trickle();
    if (argc == 2 && strcmp(argv[1], "accounts") == 0) return accounts();
    if (argc == 2 && strcmp(argv[1], "shrink") == 0) return shrink();
    if (argc == 4 && strcmp(argv[1], "crowd") == 0) return crowd(atoi(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: rawclient "
                    "devices|version|garbage|silent|hostile|scribble|payloads|trickle|shrink|crowd "
                    "N SECS|fuzz SEED N\n");
    return 2;
}
