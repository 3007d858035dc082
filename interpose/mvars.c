/* __managed__ variables of modules and libraries (cuModuleGetGlobal, cuLibraryGetGlobal and
 * cuLibraryGetManaged of one; the runtime looks its variables up with cuLibraryGetManaged).
 *
 * In the server such a variable is the driver's own managed memory, at an address D the
 * driver chose in the server's address space, where the module's kernels reach it; no
 * other process can map it. The runtime's host code dereferences the variable at D (its
 * host-side symbol is a pointer the runtime sets to what the lookup returned). So this
 * process keeps a host copy of its own at D: private pages mapped at D's pages here
 * (MAP_FIXED_NOREPLACE: an address already taken here refuses the variable, said once), and
 * bytes move between the host copy and D at the points CUDA's rules for managed memory on a
 * device without concurrent managed access allow the host and the device to hand it over:
 *
 *  - push: before device work that could read a variable (a launch, a graph launch, a copy,
 *    a memset, any asynchronous call on a stream), whatever the host wrote since the last
 *    exchange goes to D. What changed is found by comparing the host copy with a private
 *    snapshot of what D holds as far as this process knows (a client can only fool itself),
 *    and only the span from the first to the last changed byte of each variable goes. The
 *    server orders the push before every later work of the client on any stream
 *    (server/memory/managed.c), so a push costs no round trip. With no host write there is no
 *    push, so D is never overwritten with what the host saw before the device wrote it
 *    (a kernel writes, the next one reads, no synchronisation between: it reads the first
 *    one's value).
 *  - pull: when a synchronisation of this process succeeds (a stream's, an event's, the
 *    context's, a successful query, a synchronous copy that returns complete, a synchronous
 *    copy or memset naming a variable) and
 *    device work was enqueued that it may not have covered yet, every variable's bytes come
 *    back (one round trip: the server copies them into pinned memory of this process's), and
 *    are merged byte by byte: a byte the host wrote since the last exchange keeps the
 *    host's value (it goes out with the next push), any other takes the device's. Bytes the
 *    device did not change are not written, so a host thread writing a variable while
 *    another thread synchronises with an idle device loses nothing.
 *
 * Which work may be uncovered is kept per stream as the program named it (its context and
 * handle; the NULL stream as the legacy or this thread's per-thread stream): a stream's
 * synchronisation or successful query covers its own entries that were enqueued before it,
 * a context's covers all of that context's; an event's covers none (its stream is not
 * known here), so later synchronisations pull again until one covers the work. Work
 * enqueued while the process had no variable was not kept: the next variable counts every
 * context as having some, until the context synchronises. Pulling too often is only
 * slower; pulling too seldom would lose device writes.
 *
 * Ordering among the transfers: a pull's copies run after every push sent before it (the
 * server's stream for them is in order); a variable pushed after its pull was sent keeps
 * what it has, the pulled bytes being older. A new variable's first contents are read on
 * their own (no context need be current: the runtime looks its variables up before it has
 * made one), and looking one up again keeps its host copy. A module's, library's or
 * context's variables leave the table before its unload or destruction is sent, so that no
 * transfer sent after it names them.
 *
 * Why not the host copy shared with the server (a memfd mapped at D here and elsewhere in
 * the server, registered, with the server copying between it and D): the server would then
 * write into memory the host is using while it decides nothing from it, and a pull could
 * not tell a byte the host wrote since from one the device wrote; the merge needs the
 * snapshot, which is this process's alone anyway. Keeping the copy private keeps the
 * server's part to checks (each byte named must lie in a variable of this client's own
 * module or library that the driver says is managed) and ordering.
 *
 * Limits that follow, which the README states: the host may not use a variable while
 * device work that uses it runs (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS reads 0); a
 * host function or stream callback runs without a pull or a push (its stream waits for it on
 * the GPU, and a transfer from its thread could wait behind that same stream); every push
 * compares each variable's bytes, and every pull after work moves all of them. */
#define _GNU_SOURCE
#include "interpose/shim.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct mvar {
    uint64_t base, size; /* the variable: D and its bytes */
    uint8_t *snap;       /* what D holds as far as this process knows */
    uint64_t pushed;     /* push_seq of its last push */
    uint64_t owner;      /* its module or library */
    uint32_t ctx;        /* the context it goes with, 0: none (a library's managed memory) */
};

/* A stream with device work that no synchronisation has covered yet. */
struct busy {
    uint32_t ctx;
    uint16_t thread; /* a per-thread default stream's thread, else 0 */
    uint64_t stream; /* the handle, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD */
    uint64_t gen;    /* work_gen when work was last enqueued on it */
};

/* Guarded by lock: the variables, their pages (mvarpages.c), the uncovered work. live is nvars,
 * read without it by the calls that have nothing to do while it is 0. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct mvar *vars;
static size_t nvars, capvars;
static struct busy *busy;
static size_t nbusy, capbusy;
static uint64_t work_gen;
static int lost;          /* work went untracked (out of memory): always pull */
static uint64_t push_seq; /* pushes sent so far */
static atomic_size_t live;
/* Device work was enqueued while the process had no variable, so nobody kept track of it
 * (set without the lock, only when not set yet: read-mostly). The next variable then counts
 * every context's streams as having uncovered work, until that context synchronises. */
static atomic_int untracked;
#define ANY_STREAM UINT64_MAX

/* Guarded by xfer (taken before lock): one pull at a time, into pinned memory of this
 * process's made in context pull_ctx (which takes it along when it goes). */
static pthread_mutex_t xfer = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *pull_buf;
static size_t pull_cap;
static uint32_t pull_ctx;

static struct mvar *find_locked(uint64_t base)
{
    for (size_t i = 0; i < nvars; i++)
        if (vars[i].base == base) return &vars[i];
    return NULL;
}

/* ---------------------------------------------------------------- the server's part */

/* Sends PUSH records for n entries whose bytes are at src[i], splitting what does not fit
 * in one record. lock held (the records must precede any later work of any thread). */
static CUresult push_send(const struct chan_mvar_ent *e, const uint8_t *const *src, size_t n)
{
    const uint32_t room =
        CHAN_REC_MAX - (uint32_t)sizeof(struct chan_rec) - (uint32_t)sizeof(struct chan_mvar);
    size_t i = 0;
    uint64_t done = 0; /* bytes of entry i already sent */
    while (i < n) {
        struct shim_req q;
        uint32_t used = 0, k = 0;
        /* Count what fits: whole entries, or a piece of a large one. */
        size_t j = i;
        uint64_t d = done;
        while (j < n && used + sizeof(struct chan_mvar_ent) < room) {
            uint64_t left = e[j].len - d, fit = room - used - sizeof(struct chan_mvar_ent);
            uint64_t take = left < fit ? left : fit;
            used += (uint32_t)(sizeof(struct chan_mvar_ent) + take);
            k++;
            if (take < left) break;
            j++;
            d = 0;
        }
        CUresult r =
            shim_req_begin(&q, CHAN_OP_MVAR, (uint32_t)sizeof(struct chan_mvar) + used, 0, 0);
        if (r != CUDA_SUCCESS) return r;
        struct chan_mvar h = {.what = CHAN_MVAR_PUSH, .n = k};
        memcpy(q.payload, &h, sizeof(h));
        uint8_t *ent = q.payload + sizeof(h), *data = ent + (size_t)k * sizeof(*e);
        for (uint32_t x = 0; x < k; x++) {
            uint64_t left = e[i].len - done;
            uint64_t fit = (uint64_t)(q.payload + sizeof(h) + used - data);
            uint64_t take = left < fit ? left : fit;
            struct chan_mvar_ent one = {.dptr = e[i].dptr + done, .len = take};
            memcpy(ent + (size_t)x * sizeof(one), &one, sizeof(one));
            memcpy(data, src[i] + done, take);
            data += take;
            done += take;
            if (done == e[i].len) {
                i++;
                done = 0;
            }
        }
        shim_req_send(&q);
    }
    return CUDA_SUCCESS;
}

/* Pinned memory of at least n bytes for pulls; xfer held. */
static CUresult pull_room(size_t n)
{
    if (pull_buf && pull_cap >= n) return CUDA_SUCCESS;
    if (pull_buf) shim_host_free_quiet(pull_buf);
    pull_buf = NULL;
    pull_cap = 0;
    size_t want = n < (64u << 10) ? (64u << 10) : n;
    void *p = NULL;
    CUresult r = shim_host_alloc_quiet(&p, want);
    if (r != CUDA_SUCCESS) return r;
    pull_buf = p;
    pull_cap = want;
    pull_ctx = shim_current_ctx_id();
    return CUDA_SUCCESS;
}

static void forget_all(uint64_t owner, uint32_t ctx);

/* A context goes: the pull memory it holds goes with it, and so do its variables. */
static void ctx_gone(CUcontext c);
static void register_ctx_gone(void)
{
    shim_ctx_on_destroy(ctx_gone);
}

static void ctx_gone(CUcontext c)
{
    uint32_t id = 0;
    if (shim_ctx_lookup(c, &id, NULL) != CUDA_SUCCESS) return;
    /* Its variables go before its destruction is sent: no transfer after it names them. */
    if (id) forget_all(0, id);
    pthread_mutex_lock(&xfer);
    if (pull_buf && pull_ctx == id) {
        pull_buf = NULL;
        pull_cap = 0;
    }
    pthread_mutex_unlock(&xfer);
}

/* Writes into the host copy h what the device changed (in differs from snap) where the
 * host did not (h equals snap); snap becomes in. */
static void merge(uint8_t *h, uint8_t *snap, const uint8_t *in, uint64_t n)
{
    if (memcmp(in, snap, n) == 0) return;
    for (uint64_t i = 0; i < n; i++)
        if (in[i] != snap[i]) {
            if (h[i] == snap[i]) h[i] = in[i];
            snap[i] = in[i];
        }
}

/* Brings every variable's bytes from the device, merged into the host copies. A variable
 * pushed after its pull was sent keeps its host copy and snapshot: what came back is older
 * than both. */
static CUresult pull(void)
{
    pthread_mutex_lock(&xfer);
    pthread_mutex_lock(&lock);
    size_t n = 0;
    uint64_t total = 0;
    struct chan_mvar_ent *e = malloc((nvars ? nvars : 1) * sizeof(*e));
    for (size_t i = 0; e && i < nvars; i++) {
        e[n++] = (struct chan_mvar_ent){.dptr = vars[i].base, .len = vars[i].size, .off = total};
        total += vars[i].size; /* sizes the server gave: their sum fits (checked at add) */
    }
    pthread_mutex_unlock(&lock);
    CUresult r = e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && n) r = pull_room(total);
    const size_t per =
        (CHAN_REC_MAX - sizeof(struct chan_rec) - sizeof(struct chan_mvar)) / sizeof(*e);
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        struct shim_req q;
        /* Sent under the lock: the pushes before it are the ones its copies come after. */
        pthread_mutex_lock(&lock);
        /* Only the variables still known. Another thread's cuModuleUnload may have forgotten
         * some since the list was taken (its forget takes this lock, and its unload is sent
         * after it): the server, which has unloaded them, would refuse the whole pull
         * (CUDA_ERROR_INVALID_VALUE; seen in CI with managed_vars --threads through a crowded
         * server, whose threads each unload a module of their own). The list keeps their
         * offsets into pull_buf. */
        size_t known = 0;
        for (size_t j = i; j < i + k; j++) {
            const struct mvar *v = find_locked(e[j].dptr);
            if (v && v->size == e[j].len) e[i + known++] = e[j];
        }
        k = known;
        if (!k) {
            pthread_mutex_unlock(&lock);
            continue;
        }
        struct chan_mvar h = {
            .what = CHAN_MVAR_PULL, .n = (uint32_t)k, .buf = (uint64_t)(uintptr_t)pull_buf};
        uint64_t seq = push_seq;
        r = shim_req_begin(&q, CHAN_OP_MVAR, (uint32_t)(sizeof(h) + k * sizeof(*e)), 1, 0);
        if (r == CUDA_SUCCESS) {
            memcpy(q.payload, &h, sizeof(h));
            memcpy(q.payload + sizeof(h), e + i, k * sizeof(*e));
            shim_req_send(&q);
        }
        pthread_mutex_unlock(&lock);
        if (r == CUDA_SUCCESS) r = shim_req_wait(&q, NULL, NULL);
        if (r != CUDA_SUCCESS) break;
        pthread_mutex_lock(&lock);
        for (size_t j = i; j < i + k; j++) {
            struct mvar *v = find_locked(e[j].dptr);
            if (v && v->size == e[j].len && v->pushed <= seq)
                merge((uint8_t *)(uintptr_t)v->base, v->snap, pull_buf + e[j].off, v->size);
        }
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_unlock(&xfer);
    free(e);
    return r;
}

/* A new variable's first contents, in pieces the reply lane holds: no context need be
 * current (the runtime looks its variables up before it makes one). */
static CUresult read_first(uint64_t base, uint64_t size)
{
    for (uint64_t off = 0; off < size;) {
        uint64_t n = size - off < CHAN_LANE_DATA ? size - off : CHAN_LANE_DATA;
        struct {
            struct chan_mvar h;
            struct chan_mvar_ent e;
        } m = {.h = {.what = CHAN_MVAR_READ, .n = 1}, .e = {.dptr = base + off, .len = n}};
        const uint8_t *data;
        uint32_t got = 0;
        CUresult r = shim_rpc_lane(CHAN_OP_MVAR, &m, sizeof(m), &data, &got);
        if (r == CUDA_SUCCESS && got != n) r = CUDA_ERROR_UNKNOWN;
        if (r != CUDA_SUCCESS) return r;
        pthread_mutex_lock(&lock);
        struct mvar *v = find_locked(base);
        if (v && v->size == size) {
            memcpy((uint8_t *)(uintptr_t)base + off, data, n);
            memcpy(v->snap + off, data, n);
        }
        pthread_mutex_unlock(&lock);
        off += n;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- variables */

/* A variable the server says is managed: its host copy mapped (to be filled). *fresh: it
 * was not known yet. */
static CUresult add(uint64_t base, uint64_t size, uint64_t owner, uint32_t ctx, int *fresh)
{
    static int said;
    uint64_t total = size;
    CUresult r = CUDA_SUCCESS;
    /* Pushes and pulls go through the thread's connection, which in a process of one
     * connection per device (route.c) may be another than the variable's server's. */
    if (atomic_load(&shim_conns_extra))
        return shim_refuse("__managed__ variables in a process served by several GPUs' own "
                           "servers (MPSSHIM_SERVER_PER_GPU_MOVE)");
    pthread_mutex_lock(&lock);
    struct mvar *v = find_locked(base);
    *fresh = !v;
    if (v) {
        pthread_mutex_unlock(&lock);
        return v->size == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < nvars; i++)
        if (__builtin_add_overflow(total, vars[i].size, &total)) r = CUDA_ERROR_OUT_OF_MEMORY;
    uint8_t *snap = r == CUDA_SUCCESS ? calloc(1, size) : NULL;
    if (!snap || total > SIZE_MAX / 2 ||
        shim_grow((void **)&vars, &capvars, nvars, sizeof(*vars)) != 0) {
        pthread_mutex_unlock(&lock);
        free(snap);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (shim_mvar_map(base, size) != 0) {
        int first = !said++;
        pthread_mutex_unlock(&lock);
        free(snap);
        if (first)
            shim_log("__managed__ variable at %#llx (%llu bytes) refused: its address is taken "
                     "in this process, where its host copy must be (said once)",
                     (unsigned long long)base, (unsigned long long)size);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    vars[nvars++] =
        (struct mvar){.base = base, .size = size, .snap = snap, .owner = owner, .ctx = ctx};
    atomic_store(&live, nvars);
    if (atomic_exchange(&untracked, 0)) {
        uint32_t few[64], *ids = few, *more;
        size_t cap = 64, k = shim_ctx_active_ids(few, cap);
        if (k > cap && (more = malloc(k * sizeof(*more)))) {
            ids = more;
            cap = k;
            k = shim_ctx_active_ids(ids, cap); /* one made meanwhile is made after */
        }
        for (size_t i = 0; i < k && i < cap; i++)
            if (shim_grow((void **)&busy, &capbusy, nbusy, sizeof(*busy)) == 0)
                busy[nbusy++] =
                    (struct busy){.ctx = ids[i], .stream = ANY_STREAM, .gen = ++work_gen};
        if (ids != few) free(ids);
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Forgets the variable at base: its pages go unless another variable is on them. */
static void forget(uint64_t base)
{
    pthread_mutex_lock(&lock);
    struct mvar *v = find_locked(base);
    if (v) {
        shim_mvar_unmap(v->base, v->size);
        free(v->snap);
        *v = vars[--nvars];
        atomic_store(&live, nvars);
    }
    pthread_mutex_unlock(&lock);
    if (v) shim_managed_forget(base);
}

/* Forgets every variable of owner (or, with owner 0, of context ctx). */
static void forget_all(uint64_t owner, uint32_t ctx)
{
    for (;;) {
        uint64_t base = 0;
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < nvars && !base; i++)
            if (owner ? vars[i].owner == owner : vars[i].ctx == ctx) base = vars[i].base;
        pthread_mutex_unlock(&lock);
        if (!base) return;
        forget(base);
    }
}

void shim_mvar_owner_gone(uint64_t owner)
{
    if (owner && atomic_load(&live)) forget_all(owner, 0);
}

void shim_mvar_range_gone(const struct shim_range *r)
{
    if (r->kind == SHIM_HT_MEM_GLOBAL && (r->flags & SHIM_RANGE_MVAR)) forget(r->base);
}

int shim_mvar_live(void)
{
    return atomic_load(&live) != 0;
}

int shim_mvar_find(uint64_t p, uint64_t n, uint64_t *base, uint64_t *size)
{
    uint64_t end;
    if (n == 0 || __builtin_add_overflow(p, n, &end) || !atomic_load(&live)) return -1;
    int found = -1;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nvars && found; i++)
        if (p >= vars[i].base && end - vars[i].base <= vars[i].size) {
            *base = vars[i].base;
            *size = vars[i].size;
            found = 0;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

/* After a global's lookup: asks the server, once per range, whether it is managed; if so
 * the variable gets its host copy, filled from the device. Its error fails the lookup. */
static CUresult lookup_finish(const void *const *argv)
{
    const CUdeviceptr *dp = *(const CUdeviceptr *const *)argv[0];
    struct shim_range rg;
    if (!dp || shim_range_find(*dp, 1, &rg) != 0 || rg.base != *dp || rg.kind != SHIM_HT_MEM_GLOBAL)
        return CUDA_SUCCESS;
    if (!(rg.flags & SHIM_RANGE_MVAR_ASKED)) {
        struct {
            struct chan_mvar h;
            struct chan_mvar_ent e;
        } m = {.h = {.what = CHAN_MVAR_INFO, .n = 1}, .e = {.dptr = rg.base, .len = rg.size}};
        uint32_t flags = 0, got = 0;
        CUresult r = shim_rpc(CHAN_OP_MVAR, &m, sizeof(m), &flags, sizeof(flags), &got);
        if (r != CUDA_SUCCESS) return r;
        rg.flags |= SHIM_RANGE_MVAR_ASKED | (flags & CHAN_MVAR_MANAGED ? SHIM_RANGE_MVAR : 0);
        shim_range_set_flags(rg.base, rg.flags);
    }
    if (!(rg.flags & SHIM_RANGE_MVAR) || !rg.size) return CUDA_SUCCESS;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_ctx_gone);
    /* Looked up again: its host copy stays as it is (the host may have written it). */
    int fresh = 0;
    CUresult r = add(rg.base, rg.size, rg.owner, rg.ctx, &fresh);
    if (r != CUDA_SUCCESS || !fresh) return r;
    if (shim_managed_track(rg.base, rg.size) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) r = read_first(rg.base, rg.size);
    if (r != CUDA_SUCCESS) forget(rg.base);
    return r;
}

const struct shim_hook shim_hook_managed_global = {.finish = lookup_finish};

/* cuLibraryGetManaged: one of the outputs may be NULL, not both. */
static CUresult managed_before(const void *const *argv)
{
    return *(CUdeviceptr *const *)argv[0] || *(size_t *const *)argv[1] ? CUDA_SUCCESS
                                                                       : CUDA_ERROR_INVALID_VALUE;
}

const struct shim_hook shim_hook_library_managed = {.before = managed_before,
                                                    .finish = lookup_finish};

/* ---------------------------------------------------------------- work and synchronisations */

/* The stream as a program names it, made one key: its context, handle and thread. */
static struct busy key_of(CUstream s)
{
    struct busy k = {.stream = (uint64_t)(uintptr_t)s};
    if (s == NULL)
        k.stream =
            (uint64_t)(uintptr_t)(shim_ptds_active() ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY);
    if (k.stream == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD) k.thread = shim_thread_no();
    if (shim_stream_check(s, &k.ctx) != CUDA_SUCCESS) k.ctx = shim_current_ctx_id();
    return k;
}

static int same_stream(const struct busy *a, const struct busy *b)
{
    return a->ctx == b->ctx && a->stream == b->stream && a->thread == b->thread;
}

/* The first and last byte where the host copy differs from the snapshot; 0 if none. */
static int changed(const uint8_t *h, const uint8_t *snap, uint64_t n, uint64_t *first,
                   uint64_t *last)
{
    if (memcmp(h, snap, n) == 0) return 0;
    uint64_t a = 0, b = n - 1;
    while (h[a] == snap[a])
        a++;
    while (h[b] == snap[b])
        b--;
    *first = a;
    *last = b;
    return 1;
}

CUresult shim_mvar_work(CUstream s)
{
    /* Migrating managed memory's writes go at the same points (migrate.c). */
    int mig = shim_mig_live();
    /* The pushes name the calling thread's context: without one, the next work pushes. */
    if ((!atomic_load_explicit(&live, memory_order_relaxed) && !mig) || !shim_current_ctx_id())
        return CUDA_SUCCESS;
    /* Captured work runs later, as a graph: its launch pushes then. */
    if (shim_work_captured(s)) return CUDA_SUCCESS;
    CUresult r = mig ? shim_mig_work() : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS || !atomic_load_explicit(&live, memory_order_relaxed)) return r;
    pthread_mutex_lock(&lock);
    struct chan_mvar_ent *e = NULL;
    const uint8_t **src = NULL;
    size_t n = 0;
    for (size_t i = 0; i < nvars; i++) {
        uint64_t a, b;
        if (!changed((const uint8_t *)(uintptr_t)vars[i].base, vars[i].snap, vars[i].size, &a, &b))
            continue;
        if (!e && (!(e = malloc(nvars * sizeof(*e))) || !(src = malloc(nvars * sizeof(*src))))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        memcpy(vars[i].snap + a, (const uint8_t *)(uintptr_t)vars[i].base + a, b - a + 1);
        vars[i].pushed = push_seq + 1;
        e[n] = (struct chan_mvar_ent){.dptr = vars[i].base + a, .len = b - a + 1};
        src[n++] = vars[i].snap + a;
    }
    /* Sent under the lock: before any work another thread enqueues after this one saw
     * the host's writes, and in step with push_seq. */
    if (r == CUDA_SUCCESS && n && (r = push_send(e, src, n)) == CUDA_SUCCESS) push_seq++;
    pthread_mutex_unlock(&lock);
    free(e);
    free(src);
    return r;
}

void shim_mvar_worked(CUstream s)
{
    if (!atomic_load_explicit(&live, memory_order_relaxed)) {
        if (!atomic_load_explicit(&untracked, memory_order_relaxed))
            atomic_store_explicit(&untracked, 1, memory_order_relaxed);
        return;
    }
    if (shim_work_captured(s)) return;
    /* Counted once it is sent: a synchronisation begun before could not cover it. */
    struct busy k = key_of(s);
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < nbusy && !same_stream(&busy[i], &k))
        i++;
    if (i == nbusy && shim_grow((void **)&busy, &capbusy, nbusy, sizeof(*busy)) == 0)
        busy[nbusy++] = k;
    if (i < nbusy)
        busy[i].gen = ++work_gen;
    else
        lost = 1; /* out of memory: every synchronisation pulls from now on */
    pthread_mutex_unlock(&lock);
}

uint64_t shim_mvar_sync_begin(void)
{
    shim_mig_sync_begin(); /* migrating memory's queued prefetches */
    if (!atomic_load_explicit(&live, memory_order_relaxed)) return 0;
    pthread_mutex_lock(&lock);
    uint64_t g = work_gen;
    pthread_mutex_unlock(&lock);
    return g;
}

void shim_mvar_synced(enum shim_mvar_sync what, CUstream s, uint32_t ctx, uint64_t gen, CUresult *r)
{
    shim_mig_synced((int)what, s, ctx, *r); /* migrating memory's queued prefetches */
    if (*r != CUDA_SUCCESS || !atomic_load_explicit(&live, memory_order_relaxed)) return;
    /* The pull's requests name the calling thread's context: without one, the next
     * synchronisation pulls. */
    if (!shim_current_ctx_id()) return;
    struct busy k = what == SHIM_MVAR_STREAM ? key_of(s) : (struct busy){0};
    pthread_mutex_lock(&lock);
    int pending = nbusy != 0 || lost;
    pthread_mutex_unlock(&lock);
    if (!pending) return;
    CUresult p = pull();
    if (p != CUDA_SUCCESS) {
        *r = p;
        return;
    }
    pthread_mutex_lock(&lock);
    for (size_t i = nbusy; i-- > 0;) {
        int covered =
            busy[i].gen <= gen && ((what == SHIM_MVAR_STREAM && same_stream(&busy[i], &k)) ||
                                   (what == SHIM_MVAR_CTX && busy[i].ctx == ctx));
        if (covered) busy[i] = busy[--nbusy];
    }
    pthread_mutex_unlock(&lock);
}
