/* The server in the fuzzing process: main.c's start, client.c's handshake state and
 * release, worker.c's dispatch, over the CPU test driver (build/cpudrv/libcuda.so.1, loaded
 * by path as the server loads any driver). The three files are included, not linked, for
 * their static functions (init_devices, make_segment, cleanup, mark_terminated, dispatch):
 * the fuzzed code is the server's own, unchanged. Every other server file is linked as
 * built for the fuzzer (tests/fuzz/fuzz.mk).
 *
 * One thread plays the server's worker for every client, one record at a time, as a
 * worker takes them from its ring; another plays every client's callback thread (it
 * answers host functions and host nodes as the shim's does, concurrently: the server's
 * code gate waits for them); a client's staging slots are fed as the shim feeds them, and
 * the main loop's watch runs as in the server. No fault thread runs: a fault of the shared
 * context is a finding here (fh_check_idle), since the fuzz target never launches a kernel
 * that can fault. */
#define main srv_fuzz_server_main
#include "server/control/main.c"
#undef main
#include "server/core/client.c"
#include "server/core/worker.c"
#include "server/memory/copy.h"
#include "server/memory/ipc.h" /* srv_shares_live: none left once every client is gone */

#include "channel/copyplan.h"
#include "tests/fuzz/srvharness.h"

#include <dirent.h>
#include <libgen.h>

int srv_fuzz_server_main(int argc, char **argv);

struct fh_client {
    struct srv_client *c;
    struct chan ch;   /* the client's end of the segment (its producer position) */
    int peer;         /* the client's end of the socket */
    uint32_t cb_head; /* its callback thread's place in the notifications */
    int left;
};

/* The main loop's watch (srv_clients_watch) runs in a thread of its own, as in the server;
 * a client whose record has kept the worker more than HUNG_NS is killed (its socket hangs
 * up), as a user kills a program stuck in a call: a record may wait for ever on the
 * client's own doing (a module load behind its own stream's wait that nothing will end,
 * as natively). */
#define HUNG_NS (2ull * 1000 * 1000 * 1000)
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fh_client *busy; /* whose record the worker replays, guarded by busy_lock */
static uint64_t busy_since;

static void *main_loop(void *arg);
static void *callback_thread(void *arg);

/* The clients whose callbacks the callback thread answers, guarded by cb_lock (as is each
 * one's cb_head): a client leaves this list before its release. */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fh_client *answering[8];

static char kernels_dir[512];
static char log_dir[] = "/tmp/fuzz_server.XXXXXX";

/* The log goes with the process (left behind when it aborts: it tells what happened). */
static void remove_log(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/server.log", log_dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/control.log", log_dir);
    unlink(p);
    rmdir(log_dir);
}

void fh_begin(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/server.log", log_dir);
    if (truncate(p, 0) != 0) {
        /* no log: nothing to start afresh */
    }
}

void fh_show_log(void)
{
    char p[600], line[1024];
    snprintf(p, sizeof(p), "%s/server.log", log_dir);
    FILE *f = fopen(p, "r");
    fprintf(stderr, "fuzz_server: the server's log for this input (%s):\n", p);
    while (f && fgets(line, sizeof(line), f))
        fprintf(stderr, "  %s", line);
    if (f) fclose(f);
}
static uint64_t sink;
static int base_fds = -1;
static size_t base_used;
static int base_set;

const char *fh_kernels_dir(void)
{
    return kernels_dir;
}

uint64_t fh_sink(void)
{
    return sink;
}

/* Descriptors the process holds now. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* What each descriptor is, on stderr (a leak's report). */
static void list_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[300], to[300];
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(p, to, sizeof(to) - 1);
        to[n > 0 ? n : 0] = '\0';
        fprintf(stderr, "  fd %s -> %s\n", e->d_name, to);
    }
    if (d) closedir(d);
}

int fh_init(void)
{
    char exe[512], dir[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    snprintf(dir, sizeof(dir), "%s", dirname(exe)); /* BUILD/fuzz */
    const char *drv = getenv("MPSSHIM_DRIVER");
    if (drv)
        snprintf(srv.driver_path, sizeof(srv.driver_path), "%s", drv);
    else
        snprintf(srv.driver_path, sizeof(srv.driver_path), "%s/../cpudrv/libcuda.so.1", dir);
    const char *kd = getenv("MPSSHIM_TEST_KERNELS");
    snprintf(kernels_dir, sizeof(kernels_dir), "%s", kd ? kd : dir);
    if (!kd) snprintf(kernels_dir, sizeof(kernels_dir), "%s/../tests", dir);
    /* The CPU driver backs device memory with host memory: a small device keeps a fuzzed
     * size from taking the machine's memory (and libFuzzer's malloc limit). */
    setenv("MPSSHIM_CPUDRV_MEM_MB", "256", 0);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    /* The server's log, in a directory of this process's own, holds the current input's
     * lines (fh_begin): a finding shows them. FUZZ_SERVER_LOG=1: on stderr too. */
    const char *lg = getenv("FUZZ_SERVER_LOG");
    char why[256];
    /* Opening it installs the server's crash handler, which would die before libFuzzer
     * saves the input: the handlers in place before are put back. */
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGUSR2};
    struct sigaction before[6];
    for (int i = 0; i < 6; i++)
        sigaction(sigs[i], NULL, &before[i]);
    if (!mkdtemp(log_dir) ||
        srv_log_open(log_dir, "server.log", "Server", lg && *lg == '1', why, sizeof(why)) != 0)
        fprintf(stderr, "fuzz_server: no log in %s: %s\n", log_dir, why);
    for (int i = 0; i < 6; i++)
        sigaction(sigs[i], &before[i], NULL);
    atexit(remove_log);
    /* main()'s settings, with the defaults a server has. */
    srv.idle_spin_ns = 0;
    srv_spin_init();
    srv_codegate_init();
    srv_coalesce_init();
    srv.block_sync = 1;
    srv.ctx_sched = CU_CTX_SCHED_AUTO;
    srv.device_vmm = 1;
    srv.max_pinned = 64ull << 20;
    srv.release_ns = 5ull * 1000000000ull;
    srv.queue_limit = 64ull << 20;
    srv.max_clients = 48;
    srv_policy_init();
    /* init_devices sets up the host reservation and the tables too (a second
     * srv_window_init lost the first's extent list: LeakSanitizer in CI's fuzz-short). */
    if (init_devices() != 0) {
        fprintf(stderr, "fuzz_server: the server did not start over %s\n", srv.driver_path);
        return -1;
    }
    CUdeviceptr d = 0;
    if (srv_use_device(0) != CUDA_SUCCESS || DRV(cuMemAlloc_v2)(&d, 1u << 20) != CUDA_SUCCESS ||
        DRV(cuMemsetD8_v2)(d, 0, 1u << 20) != CUDA_SUCCESS ||
        DRV(cuCtxSynchronize)() != CUDA_SUCCESS) {
        fprintf(stderr, "fuzz_server: no device memory for the kernels' sink\n");
        return -1;
    }
    sink = d;
    pthread_t t, u;
    if (pthread_create(&t, NULL, main_loop, NULL) != 0 ||
        pthread_create(&u, NULL, callback_thread, NULL) != 0)
        return -1;
    pthread_detach(t);
    pthread_detach(u);
    return 0;
}

/* The shim's callback thread (interpose/hostfn.c), without functions to call: marks each
 * host function posted so far done and each host node's slot run, in order. cb_lock held. */
static void callbacks(struct fh_client *k)
{
    struct chan_callbacks *cb = k->ch.callbacks;
    uint32_t head = k->cb_head;
    while (atomic_load_explicit(&cb->fired_tail, memory_order_acquire) != head) {
        uint64_t what = cb->fired[head % CHAN_CB_SLOTS];
        head++;
        atomic_store(&cb->fired_head, head);
        if (what & CHAN_CB_NODE) {
            uint32_t slot = (uint32_t)what;
            if (slot < CHAN_HN_SLOTS)
                atomic_store_explicit(&cb->hn_flag[slot], 1, memory_order_release);
        } else {
            uint32_t seq = (uint32_t)what;
            atomic_store_explicit(&cb->done[seq % CHAN_CB_SLOTS], seq, memory_order_release);
        }
    }
    k->cb_head = head;
}

/* Polls, backing off from 20 us to 1 ms while no client posts anything (a real client's
 * thread sleeps on fired_tail; polling keeps this one thread for every client). */
static void *callback_thread(void *arg)
{
    (void)arg;
    long us = 20;
    for (;;) {
        int any = 0;
        pthread_mutex_lock(&cb_lock);
        for (int i = 0; i < 8; i++)
            if (answering[i]) {
                uint32_t head = answering[i]->cb_head;
                callbacks(answering[i]);
                any |= answering[i]->cb_head != head;
            }
        pthread_mutex_unlock(&cb_lock);
        us = any ? 20 : us * 2 > 1000 ? 1000 : us * 2;
        struct timespec ts = {0, us * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

struct fh_client *fh_connect(void)
{
    struct fh_client *k = calloc(1, sizeof(*k));
    int sv[2];
    if (!k || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        free(k);
        return NULL;
    }
    /* srv_client_start */
    struct srv_client *c = client_new(sv[0]); /* client.c */
    if (!c) {
        close(sv[0]);
        close(sv[1]);
        free(k);
        return NULL;
    }
    k->c = c;
    k->peer = sv[1];
    pthread_mutex_lock(&srv.clients_lock);
    c->id = ++srv.next_client_id;
    c->next = srv.clients;
    srv.clients = c;
    pthread_mutex_unlock(&srv.clients_lock);
    /* handshake, with the hello of a client that sets no limits */
    c->pid = getpid();
    c->uid = getuid();
    c->fault_seen = atomic_load(&srv_fault_epoch);
    atomic_store(&c->fault_ack, c->fault_seen);
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        c->gen_seen[d] = atomic_load(&srv_fault[d].gen);
    snprintf(c->exe, sizeof(c->exe), "fuzz_server");
    struct chan_hello h;
    memset(&h, 0, sizeof(h));
    char why[256];
    srv_devices_select(c, &h);
    int fd = -1;
    c->eager_left = srv.eager_kernels; /* module.c */
    /* Its process's account (account.c): both clients here are one process, as two
     * connections of a program are, and share its limits (the pinned cap above all: without
     * it a fuzzed 4 GiB managed allocation was taken, and the CPU driver's memset over it
     * outlasted the release's bound, a finding of the harness's own making). */
    if (srv_policy_resolve(&h, c->lim, why, sizeof(why)) != 0 ||
        srv_account_join(c, why, sizeof(why)) != 0 || (fd = make_segment(c)) < 0 ||
        srv_green_assign(c) != 0) {
        fprintf(stderr, "fuzz_server: no client: %s\n", why);
        abort(); /* the server always takes this client: a failure here is a finding */
    }
    close(fd);
    c->admitted = 1;
    srv_devices_publish(c);
    srv_segment_register(c, 0); /* segment.c */
    atomic_store(&c->connected, 1);
    /* srv_worker_main's start */
    c->rec = malloc(CHAN_REC_MAX);
    c->scratch = malloc(CHAN_LANE_DATA);
    c->out = malloc(CHAN_LANE_DATA);
    if (!c->rec || !c->scratch || !c->out) abort();
    chan_attach(&k->ch, c->shm);
    pthread_mutex_lock(&cb_lock);
    for (int i = 0; i < 8; i++)
        if (!answering[i]) {
            answering[i] = k;
            break;
        }
    pthread_mutex_unlock(&cb_lock);
    return k;
}

struct chan *fh_chan(struct fh_client *k)
{
    return &k->ch;
}

uint32_t fh_chunk_seq(struct fh_client *k)
{
    return srv_copy_chunk_seq(k->c);
}

int fh_gone(struct fh_client *k)
{
    return k->left || atomic_load(&k->c->dead);
}

/* Takes what the server sent on the socket (pinned memory's descriptors) and closes it. */
static void drain(struct fh_client *k)
{
    for (;;) {
        char b[64];
        char cbuf[CMSG_SPACE(sizeof(int) * 4)];
        struct iovec iov = {.iov_base = b, .iov_len = sizeof(b)};
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        if (recvmsg(k->peer, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0) return;
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
            if (h->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(fd));
                    close(fd);
                }
    }
}

static void *main_loop(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&busy_lock);
        if (busy && chan_now_ns() - busy_since > HUNG_NS) {
            shutdown(busy->peer, SHUT_RDWR);
            busy_since = UINT64_MAX / 2;
            if (getenv("FUZZ_SERVER_TRACE"))
                fprintf(stderr, "  (the client's record kept its worker 2 s: killed)\n");
        }
        pthread_mutex_unlock(&busy_lock);
        srv_clients_watch();
    }
    return NULL;
}

/* The worker's loop, once: takes every record in the ring and replays it, then polls. */
static void serve(struct fh_client *k)
{
    struct srv_client *c = k->c;
    pthread_mutex_lock(&busy_lock);
    busy = k;
    busy_since = chan_now_ns();
    pthread_mutex_unlock(&busy_lock);
    while (!atomic_load(&c->dead)) {
        /* Over its bound on queued work, the worker leaves records in the ring and polls
         * the GPU's progress: so does this, for as long as the GPU moves. */
        for (int i = 0; i < 20000 && srv_queue_paused(c); i++) {
            if (c->waits) srv_waits_poll(c, 1);
            usleep(50);
        }
        if (srv_queue_paused(c)) break;
        enum chan_next n = chan_ring_next(&c->ch, c->rec);
        if (n == CHAN_NEXT_NONE) break;
        if (n == CHAN_NEXT_BAD || dispatch(c, (struct chan_rec *)c->rec) != 0) {
            atomic_store(&c->dead, 1);
            break;
        }
    }
    pthread_mutex_lock(&busy_lock);
    busy = NULL;
    pthread_mutex_unlock(&busy_lock);
    if (!srv_client_alive(c)) atomic_store(&c->dead, 1);
    if (c->waits) srv_waits_poll(c, 1);
    drain(k);
}

/* A pageable copy through the slots, as its client sees it: chunks [first, first + n),
 * from pageable memory (htod) or into it; 0 when it is not one. */
static int staged_chunks(struct fh_client *k, const void *payload, uint32_t len, uint64_t *first,
                         uint64_t *n, int *htod)
{
    struct chan_copy m;
    if (len < sizeof(m)) return 0;
    memcpy(&m, payload, sizeof(m));
    int src = m.src.kind == CHAN_MEM_STAGED, dst = m.dst.kind == CHAN_MEM_STAGED;
    uint64_t t;
    if (src == dst || (m.flags & CHAN_CF_INLINE) || !m.width || !m.height || !m.depth ||
        __builtin_mul_overflow(m.width, m.height, &t) || __builtin_mul_overflow(t, m.depth, &t) ||
        m.first_chunk != srv_copy_chunk_seq(k->c))
        return 0;
    *first = m.first_chunk;
    *n = chan_copy_nchunks(m.width, m.height, m.depth, CHAN_SLOT_SIZE);
    *htod = src;
    return 1;
}

int fh_record(struct fh_client *k, const struct chan_rec *h, const void *payload, uint32_t len,
              uint32_t *seq0)
{
    if (fh_gone(k) || len > CHAN_REC_MAX - sizeof(struct chan_rec)) return -1;
    uint64_t first = 0, nch = 0;
    int htod = 0,
        staged = h->op == CHAN_OP_COPY && staged_chunks(k, payload, len, &first, &nch, &htod);
    if (staged && nch > CHAN_NSLOTS)
        return -1; /* the server would wait for chunks no one sends: the target's error */
    struct chan_wait w = {.spin_ns = 1000};
    struct chan_rec *r = chan_ring_reserve(&k->ch, (uint32_t)sizeof(*r) + len, &w);
    if (!r) return -1;
    *r = *h;
    r->size = (uint32_t)sizeof(*r) + len;
    if (len) memcpy(r + 1, payload, len);
    uint16_t lane = h->lane < CHAN_NLANES ? h->lane : 0;
    if (seq0) *seq0 = atomic_load(&k->ch.lanes[lane].seq);
    struct chan_slot *sl = k->ch.shm->slots;
    if (staged && htod)
        for (uint64_t i = first; i < first + nch; i++)
            atomic_store(&sl[i % CHAN_NSLOTS].filled, (uint32_t)(i + 1));
    chan_ring_publish(&k->ch, r);
    serve(k);
    if (staged && !htod)
        for (uint64_t i = first; i < first + nch; i++)
            if (atomic_load(&sl[i % CHAN_NSLOTS].filled) == (uint32_t)(i + 1))
                atomic_store(&sl[i % CHAN_NSLOTS].freed, (uint32_t)(i + 1));
    return 0;
}

void fh_raw(struct fh_client *k, const void *bytes, uint32_t len, uint64_t advance)
{
    if (fh_gone(k)) return;
    uint64_t pos = k->ch.pos % CHAN_RING_SIZE;
    if (len > CHAN_RING_SIZE - pos) len = (uint32_t)(CHAN_RING_SIZE - pos);
    memcpy(k->ch.ring + pos, bytes, len);
    k->ch.pos += advance;
    atomic_store(&k->ch.shm->tail, k->ch.pos);
    serve(k);
}

int fh_reply(struct fh_client *k, uint16_t lane, uint32_t seq0, uint32_t ms, CUresult *res,
             const uint8_t **data, uint32_t *len)
{
    if (lane >= CHAN_NLANES) return -1;
    struct chan_lane *l = &k->ch.lanes[lane];
    uint64_t until = chan_now_ns() + (uint64_t)ms * 1000000ull;
    while (atomic_load_explicit(&l->seq, memory_order_acquire) == seq0) {
        if (atomic_load(&k->c->dead) || chan_now_ns() > until) return -1;
        if (k->c->waits) srv_waits_poll(k->c, 1);
        if (atomic_load_explicit(&l->seq, memory_order_acquire) == seq0) usleep(20);
    }
    *res = (CUresult)l->result;
    *len = l->len < CHAN_LANE_DATA ? l->len : CHAN_LANE_DATA;
    *data = l->data;
    return 0;
}

int fh_send_fd(struct fh_client *k, int fd)
{
    uint8_t one = 1;
    if (fd >= 0) return chan_send_fd(k->peer, &one, 1, fd);
    return send(k->peer, &one, 1, MSG_DONTWAIT) == 1 ? 0 : -1;
}

void fh_leave(struct fh_client *k, int terminated)
{
    if (k->left) return;
    k->left = 1;
    struct srv_client *c = k->c;
    /* The process goes: its callback thread and its socket with it. */
    pthread_mutex_lock(&cb_lock);
    for (int i = 0; i < 8; i++)
        if (answering[i] == k) answering[i] = NULL;
    pthread_mutex_unlock(&cb_lock);
    close(k->peer);
    /* client_main after its worker's loop */
    if (terminated) atomic_store(&c->terminated, 1);
    atomic_store(&c->dead, 1);
    srv_spin_gone(c);
    if (terminated) mark_terminated(c);
    srv_busy(c, SRV_BUSY_RELEASE);
    cleanup(c);
    srv_busy(c, 0);
    if (c->prof) free(c->prof->op);
    free(c->prof);
    c->prof = NULL;
    close(c->sock);
    c->sock = -1;
    atomic_store(&c->finished, 1);
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client **p = &srv.clients; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&srv.clients_lock);
    if (c->left_running) {
        /* The release gave up on work still running: by design that client's state is
         * kept for the work that may still reach it; never expected of what this target
         * sends (its work always ends), so it is a finding. */
        fprintf(stderr, "fuzz_server: a client's release left its work running\n");
        fh_show_log();
        abort();
    }
    client_free(c); /* client.c */
    free(k);
}

int fh_owns(struct fh_client *k, uint32_t type, uint64_t v)
{
    return k && !k->left && srv_obj_lookup(k->c, type, v) != NULL;
}

int fh_owns_range(struct fh_client *k, uint64_t v)
{
    return k && !k->left && srv_range_find(k->c, v, 1) != NULL;
}

int fh_check_idle(char *why, size_t len)
{
    /* What the main loop does once no client is left. */
    if (srv.device_vmm && srv_arena_cached()) srv_arena_trim();
    srv_limits_idle();
    srv_pools_tidy();
    if (srv_records_live() || srv_shares_live()) {
        snprintf(why, len, "%llu object records and %llu IPC shares live with no client",
                 (unsigned long long)srv_records_live(), (unsigned long long)srv_shares_live());
        return -1;
    }
    CUresult r = srv_use_device(0);
    if (r == CUDA_SUCCESS) r = DRV(cuCtxSynchronize)();
    if (r != CUDA_SUCCESS) {
        snprintf(why, len,
                 "the shared context answers %s with no client: a client's work "
                 "faulted it",
                 srv_errname(r));
        return -1;
    }
    size_t used = 0;
    int fds = count_fds();
    if (srv_device_used(0, &used) != 0) {
        snprintf(why, len, "cuMemGetInfo failed with no client");
        return -1;
    }
    /* The first idle state is the baseline. Descriptors and device memory may be taken
     * once for good on first use (the driver's, the server's spare pools): what counts is
     * growth that goes on, which a leak of a few per input reaches within a run. */
    if (!base_set) {
        base_set = 1;
        base_used = used;
        base_fds = fds;
        return 0;
    }
    if (used > base_used + (64u << 20)) {
        snprintf(why, len, "device memory in use %zu bytes with no client, %zu at the start", used,
                 base_used);
        return -1;
    }
    if (fds > base_fds + 64) {
        snprintf(why, len, "%d descriptors open with no client, %d at the start", fds, base_fds);
        list_fds();
        return -1;
    }
    return 0;
}
