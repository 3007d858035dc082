/* libFuzzer target: the server's hand-written operations (contexts and limits, streams,
 * events, copies of every direction and dimension, module loads, launches, graphs and
 * their kernel, host, conditional, memset, memcpy, event, child and memory nodes,
 * instantiation, updates and launches, stream capture, the virtual memory calls, IPC of
 * memory, events and VMM handles, pinned and registered host memory) and the generic calls
 * around them, replayed by the server itself in this process (srvharness.c), ASan and
 * UBSan watching.
 *
 * An input is a SEQUENCE of records, not one record: each step's bytes pick a client (two
 * may take part, so that IPC, isolation and one client's departure under the other's feet
 * are reached), an operation and its fields. Fields are mostly valid, from what the
 * client got back earlier in the same input (handles, addresses, sizes, kernel layouts),
 * with sizes near their boundaries and now and then something else: another client's
 * object, one the client destroyed, zero, a value that wraps, a record cut short or
 * grown. So the fuzzer reaches instantiate -> set params -> launch -> get params and the
 * like, not only the decoders' first checks. At the end every client leaves (in an order
 * the input picks) and what the server holds must be back where it started
 * (fh_check_idle): a leak, a fault of the shared context, or an object of one client that
 * another could destroy aborts the run with the input saved.
 *
 * FUZZ_SERVER_TRACE=1 prints every record and its answer (to read a finding's input:
 * `BUILD/fuzz/fuzz_server CRASH_FILE`). */
#define _GNU_SOURCE
#include "channel/copyplan.h"
#include "channel/desc.h"
#include "channel/marshal.h"
#include "channel/proto.h"
#include "server/core/server.h"
#include "tests/fuzz/srvharness.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---------------------------------------------------------------- the input's bytes */

struct src {
    const uint8_t *p;
    size_t n, i;
};

static uint64_t take(struct src *s, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned b = 0; b < bytes && s->i < s->n; b++)
        v |= (uint64_t)s->p[s->i++] << (8 * b);
    return v;
}

/* A choice among n (0 when the input is spent). */
static uint32_t pick(struct src *s, uint32_t n)
{
    if (n <= 1) return 0;
    return (uint32_t)(take(s, n > 256 ? 2 : 1) % n);
}

/* 1 about once in n. */
static int one_in(struct src *s, uint32_t n)
{
    return pick(s, n) == n - 1;
}

/* ---------------------------------------------------------------- what a client holds */

enum kind {
    K_CTX = 1, /* v: context id */
    K_STREAM,
    K_EVENT,  /* a: creation flags */
    K_DEV,    /* device memory [v, v + size) of cuMemAlloc, AllocPitch, async, global */
    K_PINNED, /* pinned or registered host memory, or managed memory */
    K_ARRAY,  /* a: width in bytes, b: height (rows) */
    K_MODULE, /* a: image (enum image) */
    K_FUNC,   /* a: kernel (kdefs index), or -1 */
    K_GRAPH,
    K_NODE, /* b: its graph (an index here), a: CUgraphNodeType */
    K_EXEC,
    K_COND,   /* v: the conditional handle, b: its graph, a: its default value */
    K_VMM,    /* a CUmemGenericAllocationHandle, size */
    K_RESV,   /* a reservation [v, v + size) */
    K_MAP,    /* a mapping in a reservation */
    K_OPENED, /* IPC memory opened [v, v + size) */
    K_REG,    /* registered host memory [v, v + size) */
    K_WAITW,  /* device memory [v, v + size) only stream waits name (see op_stream_value) */
    K_POOL,   /* a memory pool; a: 1 when the client made it (else its device's) */
    K_TEX,
    K_SURF,
    K_MVAR, /* a __managed__ variable [v, v + size) of a module of managed.fatbin */
    K_GMEM, /* a graph's memory allocation [v, v + size): named by free nodes and frees
               only (whether it is allocated when other work runs is the client's
               business, as natively: a memset of it may fault) */
    K_NKINDS
};

struct obj {
    uint64_t v, size;
    int32_t a, b;
    uint32_t ctx; /* the client context it was made in */
    uint8_t kind, live;
};

#define MAXOBJ 160
struct cl {
    struct fh_client *fh;
    int on, left;
    struct obj o[MAXOBJ];
    int n;
    uint32_t ctx;      /* its current context id, 0: none */
    uint32_t next_ctx; /* the next id it gives a context */
    uint32_t hostfn;   /* host functions sent */
    uint16_t lane;
    uint8_t stuck[CHAN_NLANES]; /* a reply that never came: the lane is not reused */
    uint16_t threads;           /* it has sent from other threads than 1 (the server then polls) */
    uint32_t waits;             /* words of its K_WAITW allocation used so far, one per wait */
};

/* Handles one client exported through IPC, for the other (or itself) to open. */
struct share {
    uint8_t h[CU_IPC_HANDLE_SIZE];
    int what; /* CHAN_IPC_OPEN_MEM, _EVENT or _VMM */
};

struct gen {
    struct src s;
    struct cl cl[2];
    struct share sh[16];
    int nsh;
    int step;
    int trace;
    int mangles; /* records sent mangled so far */
    int keep;    /* send the payload as built (a tame kernel's parameters in it) */
    int chaos;   /* how often a field is something else than valid (odd) */
    int plain;   /* send records as built (the first context, as a shim makes it) */
};

/* 1 when this field is to be something else than valid: never, 1 in 64, 1 in 16 or 1 in
 * 4 of them, as the input's first byte says (inputs that stay valid go deepest; the others
 * try each check on the way). */
static int odd(struct gen *g)
{
    static const uint32_t in[] = {0, 64, 16, 4};
    return in[g->chaos] && one_in(&g->s, in[g->chaos]);
}

/* 1 when FUZZ_SERVER_KNOWN=1: the target also sends what makes the findings it found
 * (tests/fuzz/repro_*.c), for a run after their fix. Without it, it leaves them out, so that
 * a run goes on to find others. */
static int known(void)
{
    static int on = -1;
    if (on < 0) on = getenv("FUZZ_SERVER_KNOWN") && *getenv("FUZZ_SERVER_KNOWN") == '1';
    return on;
}

/* A size or count: `valid`, or (odd) one near a boundary or anything. */
static uint64_t num(struct gen *g, uint64_t valid)
{
    // clang-format off: a table of values; clang-format would put one a line
    static const uint64_t edge[] = {0, 1, 2, 3, 4, 7, 8, 255, 4095, 4096, 4097, 65536,
                                    1ull << 20, (1ull << 31) - 1, 1ull << 31, 1ull << 32,
                                    (1ull << 32) - 1, 1ull << 40, 1ull << 62, 1ull << 63,
                                    UINT64_MAX, UINT64_MAX - 7, UINT64_MAX / 2 + 1};
    // clang-format on
    if (!odd(g)) return valid;
    switch (pick(&g->s, 6)) {
    case 0:
        return 0;
    case 1:
        return valid + 1;
    case 2:
        return valid ? valid - 1 : 0;
    case 3:
        return edge[pick(&g->s, sizeof(edge) / sizeof(edge[0]))];
    case 4:
        return take(&g->s, 8);
    default:
        return valid * 2 + pick(&g->s, 16);
    }
}

static struct obj *add(struct cl *k, int kind, uint64_t v, uint64_t size, int32_t a, int32_t b)
{
    int at = k->n < MAXOBJ ? k->n++ : -1;
    for (int i = 0; at < 0 && i < MAXOBJ; i++)
        if (!k->o[i].live) at = i;
    if (at < 0) at = (int)(v % MAXOBJ);
    struct obj *o = &k->o[at];
    *o = (struct obj){
        .v = v, .size = size, .a = a, .b = b, .ctx = k->ctx, .kind = (uint8_t)kind, .live = 1};
    return o;
}

/* One of the client's live objects of a kind (NULL: none). */
static struct obj *own(struct src *s, struct cl *k, int kind)
{
    int n = 0;
    for (int i = 0; i < k->n; i++)
        n += k->o[i].live && k->o[i].kind == kind;
    if (!n) return NULL;
    int want = (int)pick(s, (uint32_t)n);
    for (int i = 0; i < k->n; i++)
        if (k->o[i].live && k->o[i].kind == kind && want-- == 0) return &k->o[i];
    return NULL;
}

/* One it had and destroyed, or NULL. */
static struct obj *stale(struct src *s, struct cl *k, int kind)
{
    int n = 0;
    for (int i = 0; i < k->n; i++)
        n += !k->o[i].live && k->o[i].kind == kind;
    if (!n) return NULL;
    int want = (int)pick(s, (uint32_t)n);
    for (int i = 0; i < k->n; i++)
        if (!k->o[i].live && k->o[i].kind == kind && want-- == 0) return &k->o[i];
    return NULL;
}

static struct cl *other(struct gen *g, struct cl *k)
{
    return k == &g->cl[0] ? &g->cl[1] : &g->cl[0];
}

/* A value naming an object of `kind`: one of the client's own; or (odd) the other
 * client's, one destroyed, zero, or anything. *o gets the record when it is the client's. */
static uint64_t name(struct gen *g, struct cl *k, int kind, struct obj **o)
{
    struct obj *x = NULL;
    uint64_t v = 0;
    switch (odd(g) ? pick(&g->s, 5) : 9) {
    case 0:
        v = 0;
        break;
    case 1:
        v = take(&g->s, 8);
        break;
    case 2:
    case 3:
        x = own(&g->s, other(g, k), kind);
        v = x ? x->v : 0;
        x = NULL;
        break;
    case 4:
        x = stale(&g->s, k, kind);
        v = x ? x->v : 0;
        x = NULL;
        break;
    default:
        x = own(&g->s, k, kind);
        v = x ? x->v : 0;
        break;
    }
    if (o) *o = x;
    return v;
}

/* Marks everything made in context id dead (its destruction frees it), except the kinds
 * that belong to no context. */
static void ctx_gone(struct cl *k, uint32_t id)
{
    for (int i = 0; i < k->n; i++) {
        struct obj *o = &k->o[i];
        if (o->live && o->ctx == id && o->kind != K_GRAPH && o->kind != K_NODE &&
            o->kind != K_EXEC && o->kind != K_COND && o->kind != K_VMM && o->kind != K_RESV &&
            o->kind != K_MAP)
            o->live = 0;
    }
}

/* A graph's destruction takes its nodes and conditional handles. */
static void graph_gone(struct cl *k, struct obj *gr)
{
    int gi = (int)(gr - k->o);
    gr->live = 0;
    for (int i = 0; i < k->n; i++)
        if ((k->o[i].kind == K_NODE || k->o[i].kind == K_COND) && k->o[i].b == gi) k->o[i].live = 0;
}

/* ---------------------------------------------------------------- records */

#define NO_REPLY ((CUresult)0x7fffffff)

static const char *op_name(unsigned op)
{
    static const char *const names[CHAN_OP_END - CHAN_OP_BASE] = CHAN_OP_NAMES;
    if (op < SHIM_NCALLS) return shim_calls[op].name;
    if (op >= CHAN_OP_BASE && op < CHAN_OP_END) return names[op - CHAN_OP_BASE];
    return "?";
}

/* The members the server checks of each operation's payload before its handler runs
 * (CHAN_OP_CHECKED, from its %payload line): ranges, and the counts of trailing parts. */
static const struct {
    unsigned op;
    size_t off, width;
} checked[] = {
#define X(op, type, m, l, h) {op, offsetof(type, m), sizeof(((type *)0)->m)},
#define Y(op, type, m, size) {op, offsetof(type, m), sizeof(((type *)0)->m)},
    CHAN_OP_CHECKED(X, Y)
#undef X
#undef Y
};

/* One member the server checks of op's payload made a lie (one more, one less, or any
 * value: a count that says more or less than the record holds): 1, or 0 when op has none. */
static int lie(struct gen *g, unsigned op, uint8_t *p, uint32_t len)
{
    uint32_t n = 0, which;
    for (size_t i = 0; i < sizeof(checked) / sizeof(checked[0]); i++)
        n += checked[i].op == op;
    which = pick(&g->s, n);
    for (size_t i = 0; n && i < sizeof(checked) / sizeof(checked[0]); i++) {
        if (checked[i].op != op || which--) continue;
        uint64_t v = 0;
        if (checked[i].off + checked[i].width > len) return 0;
        memcpy(&v, p + checked[i].off, checked[i].width);
        uint32_t how = pick(&g->s, 3);
        v = how == 0 ? v + 1 : how == 1 ? v - 1 : take(&g->s, 4);
        memcpy(p + checked[i].off, &v, checked[i].width); /* little-endian: the low bytes */
        return 1;
    }
    return 0;
}

/* A record's payload, now and then cut short, grown, scribbled on, or with a member the
 * server checks made a lie (a hostile client's framing of a well-formed request). */
static uint32_t mangle(struct gen *g, unsigned op, uint8_t *p, uint32_t len, uint32_t cap)
{
    if (g->plain || g->keep || !odd(g)) return len;
    g->mangles++;
    uint32_t how = pick(&g->s, 5);
    if (how == 4 && lie(g, op, p, len)) return len;
    switch (how) {
    case 0:
        return len ? (uint32_t)pick(&g->s, len) : 0;
    case 1: {
        uint32_t more = 1 + pick(&g->s, 64);
        if (len + more > cap) return len;
        memset(p + len, (int)take(&g->s, 1), more);
        return len + more;
    }
    default:
        for (int i = 0, n = 1 + (int)pick(&g->s, 4); i < n && len; i++)
            p[pick(&g->s, len)] ^= (uint8_t)(1u << pick(&g->s, 8));
        return len;
    }
}

/* Sends a record of client k; with `reply`, waits for the answer (its data into *out,
 * up to cap bytes, its length into *outlen). NO_REPLY when none is asked for or came.
 * FLAG_ONLY: asks for a reply that an asynchronous operation never sends (not waited for). */
#define FLAG_ONLY 2
static CUresult send_rec(struct gen *g, struct cl *k, unsigned op, int reply, uint8_t *p,
                         uint32_t len, uint32_t cap, void *out, uint32_t outcap, uint32_t *outlen)
{
    if (fh_gone(k->fh)) return NO_REPLY;
    len = mangle(g, op, p, len, cap);
    struct chan_rec h = {.op = (uint16_t)op, .thread = 1, .ctx = k->ctx};
    if (reply) {
        h.flags = CHAN_RF_REPLY;
        for (int i = 0; i < CHAN_NLANES && k->stuck[k->lane]; i++)
            k->lane = (uint16_t)((k->lane + 1) % CHAN_NLANES);
        h.lane = k->lane;
    }
    /* Now and then another thread (its per-thread default stream) or per-thread default
     * stream semantics; or (odd) no context, one it does not have, a lane past the last. */
    if (!g->plain && one_in(&g->s, 16)) {
        h.thread = (uint16_t)(2 + pick(&g->s, 3));
        k->threads = 1;
    }
    if (!g->plain && one_in(&g->s, 16)) h.flags |= CHAN_RF_PTDS;
    switch (g->plain || !odd(g) ? 9 : pick(&g->s, 3)) {
    case 0:
        h.ctx = 0;
        break;
    case 1:
        h.ctx = k->ctx + 1 + pick(&g->s, 3);
        break;
    case 2:
        if (reply) h.lane = (uint16_t)(CHAN_NLANES + pick(&g->s, 4));
        break;
    default:
        break;
    }
    uint32_t seq0 = 0;
    if (fh_record(k->fh, &h, p, len, &seq0) != 0) return NO_REPLY;
    CUresult res = NO_REPLY;
    const uint8_t *data = NULL;
    uint32_t dlen = 0;
    if (reply == 1 && h.lane < CHAN_NLANES) {
        if (fh_reply(k->fh, h.lane, seq0, 1000, &res, &data, &dlen) != 0) {
            k->stuck[h.lane] = 1;
            res = NO_REPLY;
        }
        k->lane = (uint16_t)((k->lane + 1) % CHAN_NLANES);
    }
    if (res != NO_REPLY && out) {
        uint32_t n = dlen < outcap ? dlen : outcap;
        memcpy(out, data, n);
        if (outlen) *outlen = n;
    }
    if (g->trace)
        fprintf(stderr, "  #%d c%d %s(%u bytes%s) -> %s\n", g->step, (int)(k - g->cl), op_name(op),
                len, h.flags & CHAN_RF_REPLY ? "" : ", no reply",
                res == NO_REPLY ? "-" : srv_errname(res));
    return res;
}

/* A described call, packed as the shim packs it (without the shim's checks). */
static const char *keep_str(const char *s)
{
    (void)s;
    return "";
}
static const void *keep_array(int param, const void *data, size_t bytes)
{
    (void)param;
    (void)bytes;
    return data;
}

static CUresult gcall(struct gen *g, struct cl *k, int id, const void *const *argv, int nargs)
{
    static uint8_t buf[CHAN_REC_MAX];
    static uint8_t rep[CHAN_LANE_DATA];
    const struct shim_call *d = &shim_calls[id];
    if (d->nparams != nargs) {
        fprintf(stderr, "fuzz_server: %s takes %d parameters, the target gave %d\n", d->name,
                d->nparams, nargs);
        abort();
    }
    size_t rlen;
    CUresult err;
    size_t n = chan_pack_call(d, argv, buf, sizeof(buf) - 256, &rlen, &err);
    if (err != CUDA_SUCCESS) return err;
    int reply = d->cls == SHIM_SYNC || one_in(&g->s, 8);
    uint32_t got = 0;
    CUresult r = send_rec(g, k, (unsigned)id, reply, buf, (uint32_t)n, sizeof(buf) - 16, rep,
                          sizeof(rep), &got);
    if (r == NO_REPLY) return r;
    static const struct chan_keep keep = {.str = keep_str, .array = keep_array};
    if (r == CUDA_SUCCESS) chan_unpack_reply(d, argv, rep, got, &keep, 0);
    return r;
}

/* An isolation failure: a call naming only another client's object succeeded. */
static void isolation(struct gen *g, const char *what, uint64_t v)
{
    fprintf(stderr, "fuzz_server: step %d: %s of another client's object %#llx succeeded\n",
            g->step, what, (unsigned long long)v);
    fh_show_log();
    abort();
}

/* ---------------------------------------------------------------- kernels */

enum image { IMG_KERNELS, IMG_COND, IMG_MANAGED, IMG_NIMAGES, IMG_MANGLED = 9 };
static uint8_t *images[IMG_NIMAGES];
static size_t image_len[IMG_NIMAGES];

/* The test kernels the target launches, and how each parameter is filled: P a pointer into
 * the sink past its first 64 KiB, Z one into its first 64 KiB (never written: a
 * conditional's value stays 0, so no WHILE loops for ever), N a count of at most 2048
 * elements, V anything, H a conditional handle. Kernels with no pointer ("wild") take any
 * launch configuration; the others a small one, so that nothing they do can fault. */
static const struct kdef {
    const char *name;
    int image;
    const char *params;
} kdefs[] = {
    {"empty_kernel", IMG_KERNELS, ""},     {"global_counter_bump", IMG_KERNELS, ""},
    {"fill_u32", IMG_KERNELS, "PVN"},      {"inc_u32", IMG_KERNELS, "PN"},
    {"mul_add_i32", IMG_KERNELS, "PVVN"},  {"param_mix", IMG_KERNELS, "VVVVVVP"},
    {"struct_param", IMG_KERNELS, "VP"},   {"copy_u8", IMG_KERNELS, "PPN"},
    {"write_pattern", IMG_KERNELS, "PNV"}, {"vec_add", IMG_KERNELS, "PPPN"},
    {"saxpy", IMG_KERNELS, "VPPN"},        {"set_cond", IMG_COND, "HZ"},
    {"countdown", IMG_COND, "HZ"},         {"mv_add", IMG_MANAGED, "V"},
    {"mv_read", IMG_MANAGED, "P"},
};
#define NKDEFS ((int)(sizeof(kdefs) / sizeof(kdefs[0])))
/* Each kernel's layout, as the server described it ({offset, size} pairs). */
static struct {
    int known;
    uint32_t n, bytes;
    uint32_t off[16], size[16];
} layout[NKDEFS];

static int load_images(void)
{
    static const char *const names[IMG_NIMAGES] = {"kernels.ptx", "cond.ptx", "managed.fatbin"};
    for (int i = 0; i < IMG_NIMAGES; i++) {
        char path[700];
        snprintf(path, sizeof(path), "%s/%s", fh_kernels_dir(), names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "fuzz_server: no %s (make B=... all builds it)\n", path);
            return -1;
        }
        images[i] = malloc(1 << 20);
        image_len[i] = images[i] ? fread(images[i], 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (!image_len[i]) return -1;
        if (strstr(names[i], ".ptx"))
            images[i][image_len[i]++] = '\0'; /* PTX is text, given with its NUL */
    }
    return 0;
}

/* Packs kernel kd's parameters into p (room bytes) by its layout; the bytes used. */
static uint32_t pack_params(struct gen *g, struct cl *k, int kd, uint8_t *p, uint32_t room)
{
    if (kd < 0 || !layout[kd].known || layout[kd].bytes > room) return 0;
    memset(p, 0, layout[kd].bytes);
    const char *spec = kdefs[kd].params;
    for (uint32_t i = 0; i < layout[kd].n && spec[i]; i++) {
        uint64_t v = 0;
        switch (spec[i]) {
        case 'P':
            v = fh_sink() + 65536 + 65536 * pick(&g->s, 14) + 8 * pick(&g->s, 64);
            break;
        case 'Z':
            v = fh_sink() + 4 * pick(&g->s, 1024);
            break;
        case 'N':
            v = pick(&g->s, 2049);
            break;
        case 'H': {
            struct obj *c = own(&g->s, k, K_COND);
            v = c && !odd(g) ? c->v : take(&g->s, 8);
            break;
        }
        default:
            v = take(&g->s, 8);
            break;
        }
        uint32_t sz = layout[kd].size[i] < 8 ? layout[kd].size[i] : 8;
        if (layout[kd].off[i] + sz <= layout[kd].bytes) memcpy(p + layout[kd].off[i], &v, sz);
        /* A struct's bytes past its first 8 are anything */
        for (uint32_t b = 8; b < layout[kd].size[i] && layout[kd].off[i] + b < layout[kd].bytes;
             b++)
            p[layout[kd].off[i] + b] = (uint8_t)take(&g->s, 1);
    }
    return layout[kd].bytes;
}

/* 1 when kernel kd takes parameters: its pointers must point into the sink and its launch
 * stay small (its CPU twin does its work once per thread along y and z), so neither its
 * parameters nor its configuration may be scribbled on. The others (no parameter: nothing
 * to point anywhere; their twins do O(1) work) and unknown functions (sent no parameters:
 * the driver refuses any that takes some) take anything. */
static int tame(int kd)
{
    return kd >= 0 && kdefs[kd].params[0] != '\0';
}

/* A launch configuration: small for a tame kernel, anything for the others. */
static void config(struct gen *g, int kd, uint32_t grid[3], uint32_t block[3], uint32_t *smem)
{
    int wild = !tame(kd);
    for (int i = 0; i < 3; i++) {
        grid[i] = i ? 1 : 1 + pick(&g->s, 4);
        block[i] = i ? 1 : 1 + pick(&g->s, 64);
        if (wild && one_in(&g->s, 4)) {
            grid[i] = (uint32_t)num(g, grid[i]);
            block[i] = (uint32_t)num(g, block[i]);
        }
    }
    *smem = wild && one_in(&g->s, 4) ? (uint32_t)num(g, 1024) : 0;
}

/* ---------------------------------------------------------------- operations */

typedef void op_fn(struct gen *g, struct cl *k);
static op_fn op_graph_create, op_event_create, op_stream_create, op_module_load, op_get_function;
static struct obj *need(struct gen *g, struct cl *k, int kind);

static void op_ctx_create(struct gen *g, struct cl *k)
{
    struct chan_ctx m = {.id = k->next_ctx, .device = 0, .primary = pick(&g->s, 2)};
    switch (pick(&g->s, 10)) {
    case 0:
        m.id = 0;
        break;
    case 1:
        m.id = k->ctx;
        break;
    case 2:
        m.device = (int32_t)take(&g->s, 4);
        break;
    case 3:
        m.device = 1;
        break;
    default:
        break;
    }
    if (send_rec(g, k, CHAN_OP_CTX_CREATE, 1, (uint8_t *)&m, sizeof(m), sizeof(m), NULL, 0, NULL) ==
        CUDA_SUCCESS) {
        add(k, K_CTX, m.id, 0, 0, 0);
        if (m.id == k->next_ctx) k->next_ctx++;
        if (!k->ctx || one_in(&g->s, 2)) k->ctx = m.id;
    }
}

static void op_ctx_destroy(struct gen *g, struct cl *k)
{
    struct obj *x;
    struct chan_ctx m = {.id = (uint32_t)name(g, k, K_CTX, &x)};
    if (send_rec(g, k, CHAN_OP_CTX_DESTROY, 1, (uint8_t *)&m, sizeof(m), sizeof(m), NULL, 0,
                 NULL) == CUDA_SUCCESS) {
        ctx_gone(k, m.id);
        for (int i = 0; i < k->n; i++)
            if (k->o[i].kind == K_CTX && k->o[i].v == m.id) k->o[i].live = 0;
        if (k->ctx == m.id) {
            struct obj *c = own(&g->s, k, K_CTX);
            k->ctx = c ? (uint32_t)c->v : 0;
        }
    }
}

static void op_ctx_sync(struct gen *g, struct cl *k)
{
    uint32_t id = (uint32_t)name(g, k, K_CTX, NULL);
    send_rec(g, k, CHAN_OP_CTX_SYNC, 1, (uint8_t *)&id, one_in(&g->s, 2) ? sizeof(id) : 0,
             sizeof(id), NULL, 0, NULL);
}

static void op_limit(struct gen *g, struct cl *k)
{
    static const uint64_t typical[] = {1024, 4096, 1u << 20, 8u << 20, 2, 2048, 64, 0};
    struct chan_limit m = {.set = pick(&g->s, 2), .limit = pick(&g->s, CU_LIMIT_MAX + 2)};
    m.value = num(g, typical[pick(&g->s, 8)]);
    if (odd(g)) m.limit = (uint32_t)take(&g->s, 4);
    uint64_t v = 0;
    send_rec(g, k, CHAN_OP_CTX_LIMIT, 1, (uint8_t *)&m, sizeof(m), sizeof(m), &v, sizeof(v), NULL);
}

/* A stream, of any priority; one within 2 of INT_MIN only with known(): the server's
 * priority arithmetic overflows (tests/fuzz/repro_priority.c). */
static void op_stream_create(struct gen *g, struct cl *k)
{
    struct chan_stream_create m = {.flags = pick(&g->s, 2),
                                   .priority = (int32_t)pick(&g->s, 5) - 3};
    if (odd(g)) m.priority = (int32_t)take(&g->s, 4);
    if (!known() && m.priority < INT32_MIN / 2) m.priority = INT32_MIN / 2;
    if (odd(g)) m.flags = (uint32_t)take(&g->s, 4);
    uint64_t s = 0;
    g->plain = !known(); /* a scribbled priority may be one of those */
    CUresult r = send_rec(g, k, CHAN_OP_STREAM_CREATE, 1, (uint8_t *)&m, sizeof(m), sizeof(m), &s,
                          sizeof(s), NULL);
    g->plain = 0;
    if (r == CUDA_SUCCESS && s) add(k, K_STREAM, s, 0, 0, 0);
}

/* A stream: mostly the client's own or a default one. */
static uint64_t stream(struct gen *g, struct cl *k)
{
    switch (pick(&g->s, 8)) {
    case 0:
        return 0;
    case 1:
        return (uint64_t)(uintptr_t)CU_STREAM_LEGACY;
    case 2:
        return (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD;
    default:
        return name(g, k, K_STREAM, NULL);
    }
}

static void op_stream_destroy(struct gen *g, struct cl *k)
{
    struct obj *x;
    uint64_t s = name(g, k, K_STREAM, &x);
    int theirs = !x && s && fh_owns(other(g, k)->fh, SHIM_HT_CUstream, s) &&
                 !fh_owns(k->fh, SHIM_HT_CUstream, s);
    CUresult r = send_rec(g, k, CHAN_OP_STREAM_DESTROY, 1, (uint8_t *)&s, sizeof(s), sizeof(s),
                          NULL, 0, NULL);
    if (r == CUDA_SUCCESS && theirs) isolation(g, "cuStreamDestroy", s);
    if (r == CUDA_SUCCESS && x) x->live = 0;
}

static void op_stream_sync(struct gen *g, struct cl *k)
{
    uint64_t s = stream(g, k);
    send_rec(g, k, CHAN_OP_STREAM_SYNC, 1, (uint8_t *)&s, sizeof(s), sizeof(s), NULL, 0, NULL);
}

static void op_event_create(struct gen *g, struct cl *k)
{
    static const uint64_t flags[] = {
        0, CU_EVENT_DISABLE_TIMING, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING,
        CU_EVENT_BLOCKING_SYNC, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING};
    uint64_t ev = 0, fl = flags[pick(&g->s, 5)];
    if (odd(g)) fl = pick(&g->s, 2) ? CU_EVENT_INTERPROCESS : take(&g->s, 4);
    void *pev = &ev;
    const void *a[] = {&pev, &fl};
    if (gcall(g, k, SHIM_ID_cuEventCreate, a, 2) == CUDA_SUCCESS && ev)
        add(k, K_EVENT, ev, 0, (int32_t)fl, 0);
}

static void op_event_record(struct gen *g, struct cl *k)
{
    need(g, k, K_EVENT);
    uint64_t ev = name(g, k, K_EVENT, NULL), st = stream(g, k), fl = pick(&g->s, 2);
    const void *a[] = {&ev, &st, &fl};
    if (one_in(&g->s, 2))
        gcall(g, k, SHIM_ID_cuEventRecord, a, 2);
    else
        gcall(g, k, SHIM_ID_cuEventRecordWithFlags, a, 3);
}

static void op_event_misc(struct gen *g, struct cl *k)
{
    need(g, k, K_EVENT);
    uint64_t ev = name(g, k, K_EVENT, NULL);
    switch (pick(&g->s, 4)) {
    case 0: {
        const void *a[] = {&ev};
        gcall(g, k, SHIM_ID_cuEventQuery, a, 1);
        break;
    }
    case 1: {
        float ms;
        void *pms = &ms;
        uint64_t e2 = name(g, k, K_EVENT, NULL);
        const void *a[] = {&pms, &ev, &e2};
        gcall(g, k, SHIM_ID_cuEventElapsedTime_v2, a, 3);
        break;
    }
    case 2: {
        uint64_t st = stream(g, k), fl = odd(g) ? take(&g->s, 4) : 0;
        const void *a[] = {&st, &ev, &fl};
        gcall(g, k, SHIM_ID_cuStreamWaitEvent, a, 3);
        break;
    }
    default:
        send_rec(g, k, CHAN_OP_EVENT_SYNC, 1, (uint8_t *)&ev, sizeof(ev), sizeof(ev), NULL, 0,
                 NULL);
        break;
    }
}

static void op_event_destroy(struct gen *g, struct cl *k)
{
    struct obj *x;
    uint64_t ev = name(g, k, K_EVENT, &x);
    int theirs = !x && ev && fh_owns(other(g, k)->fh, SHIM_HT_CUevent, ev) &&
                 !fh_owns(k->fh, SHIM_HT_CUevent, ev);
    const void *a[] = {&ev};
    CUresult r = gcall(g, k, SHIM_ID_cuEventDestroy_v2, a, 1);
    if (r == CUDA_SUCCESS && theirs) isolation(g, "cuEventDestroy", ev);
    if (r == CUDA_SUCCESS && x) x->live = 0;
}

/* A device address: inside one of the client's ranges of memory (`len` more bytes fitting
 * there, mostly), or another's, or a freed one, or anything. */
static uint64_t devptr(struct gen *g, struct cl *k, uint64_t *room)
{
    static const int kinds[] = {K_DEV, K_DEV, K_DEV, K_MAP, K_OPENED, K_PINNED};
    struct obj *x = NULL;
    uint64_t v = name(g, k, kinds[pick(&g->s, 6)], &x);
    *room = x ? x->size : 4096;
    if (x && x->size > 4 && one_in(&g->s, 3)) {
        uint64_t off = pick(&g->s, 64) * 4;
        if (off < x->size) {
            v += off;
            *room = x->size - off;
        }
    }
    return v;
}

static void op_mem_alloc(struct gen *g, struct cl *k)
{
    static const uint64_t sizes[] = {256, 4096, 4100, 65536, 1u << 20, 3u << 20};
    uint64_t d = 0, bytes = num(g, sizes[pick(&g->s, 6)]);
    void *pd = &d;
    switch (pick(&g->s, 4)) {
    case 0: {
        uint64_t pitch = 0, w = num(g, 100 + pick(&g->s, 600)), h = 1 + pick(&g->s, 8),
                 es = (uint64_t)4 << pick(&g->s, 3);
        void *pp = &pitch;
        if (odd(g)) es = take(&g->s, 4);
        const void *a[] = {&pd, &pp, &w, &h, &es};
        if (gcall(g, k, SHIM_ID_cuMemAllocPitch_v2, a, 5) == CUDA_SUCCESS && d)
            add(k, K_DEV, d, pitch * h, 0, 0);
        break;
    }
    case 1: {
        uint64_t st = stream(g, k);
        const void *a[] = {&pd, &bytes, &st};
        if (gcall(g, k, SHIM_ID_cuMemAllocAsync, a, 3) == CUDA_SUCCESS && d)
            add(k, K_DEV, d, bytes, 1, 0);
        break;
    }
    default: {
        const void *a[] = {&pd, &bytes};
        if (gcall(g, k, SHIM_ID_cuMemAlloc_v2, a, 2) == CUDA_SUCCESS && d)
            add(k, K_DEV, d, bytes, 0, 0);
        break;
    }
    }
}

static void op_mem_free(struct gen *g, struct cl *k)
{
    struct obj *x;
    uint64_t d = name(g, k, own(&g->s, k, K_GMEM) && one_in(&g->s, 3) ? K_GMEM : K_DEV, &x);
    if (x && odd(g)) d += 4 * (1 + pick(&g->s, 16)); /* inside, not its base */
    int theirs = !x && d && fh_owns_range(other(g, k)->fh, d) && !fh_owns_range(k->fh, d);
    CUresult r;
    if (one_in(&g->s, 3)) {
        uint64_t st = stream(g, k);
        const void *a[] = {&d, &st};
        r = gcall(g, k, SHIM_ID_cuMemFreeAsync, a, 2);
    } else {
        const void *a[] = {&d};
        r = gcall(g, k, SHIM_ID_cuMemFree_v2, a, 1);
    }
    if (r == CUDA_SUCCESS && theirs) isolation(g, "cuMemFree", d);
    if ((r == CUDA_SUCCESS || r == NO_REPLY) && x && x->v == d) x->live = 0;
}

static void op_memset(struct gen *g, struct cl *k)
{
    need(g, k, K_DEV);
    uint64_t room, d = devptr(g, k, &room), val = take(&g->s, 4), st = stream(g, k);
    unsigned es = 1u << pick(&g->s, 3); /* 1, 2, 4 bytes */
    uint64_t elems = room / es < 4096 ? room / es : 4096;
    uint64_t n = num(g, elems ? pick(&g->s, (uint32_t)elems) + 1 : 1);
    int async = pick(&g->s, 2), twod = one_in(&g->s, 3);
    if (twod) {
        uint64_t h = num(g, 1 + pick(&g->s, 4));
        uint64_t w = num(g, (room / (h ? h : 1)) / es / 2 + 1);
        uint64_t pitch = num(g, w * es + pick(&g->s, 2) * 64);
        static const int ids[2][3] = {
            {SHIM_ID_cuMemsetD2D8_v2, SHIM_ID_cuMemsetD2D16_v2, SHIM_ID_cuMemsetD2D32_v2},
            {SHIM_ID_cuMemsetD2D8Async, SHIM_ID_cuMemsetD2D16Async, SHIM_ID_cuMemsetD2D32Async}};
        const void *a[] = {&d, &pitch, &val, &w, &h, &st};
        gcall(g, k, ids[async][es == 1 ? 0 : es == 2 ? 1 : 2], a, 5 + async);
    } else {
        static const int ids[2][3] = {
            {SHIM_ID_cuMemsetD8_v2, SHIM_ID_cuMemsetD16_v2, SHIM_ID_cuMemsetD32_v2},
            {SHIM_ID_cuMemsetD8Async, SHIM_ID_cuMemsetD16Async, SHIM_ID_cuMemsetD32Async}};
        const void *a[] = {&d, &val, &n, &st};
        gcall(g, k, ids[async][es == 1 ? 0 : es == 2 ? 1 : 2], a, 3 + async);
    }
}

/* Stream memory operations. Without known(), waits only where they pass: each on a word of
 * its own, of an allocation nothing else writes or frees, after a write of the value waited
 * for on the same (NULL) stream of the allocation's context. Any wait anywhere only with
 * known(): a wait that holds its stream (a racing write, a value no write gives) is then
 * ended by no release when the client frees the word first (tests/fuzz/repro_waitfree.c) or
 * waits on it again for another value (tests/fuzz/repro_waitvalue.c); and two waits on one
 * word, each after its own write (write 5, wait for 5, write 7, wait for 7), may hold their
 * stream when the client leaves with them still queued: the release writes 7, which may
 * land between the stream's write of 5 and its wait for 5 (seen here; the same root). */
static void op_stream_value(struct gen *g, struct cl *k)
{
    if (!known()) {
        struct obj *w = own(&g->s, k, K_WAITW);
        if (!w && k->ctx) {
            uint64_t d = 0, bytes = 4096;
            void *pd = &d;
            const void *a[] = {&pd, &bytes};
            if (gcall(g, k, SHIM_ID_cuMemAlloc_v2, a, 2) == CUDA_SUCCESS && d)
                w = add(k, K_WAITW, d, bytes, 0, 0);
        }
        if (!w || w->ctx != k->ctx) return;
        if (k->waits >= 1024) return;
        uint64_t st = 0, d = w->v + 4 * k->waits++, v = take(&g->s, 4) & 0x7fffffffu, fl = 0;
        const void *a[] = {&st, &d, &v, &fl};
        g->plain = 1; /* in its context, on its stream, as built */
        gcall(g, k, SHIM_ID_cuStreamWriteValue32_v2, a, 4);
        fl = pick(&g->s, 2) ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ;
        if (fl == CU_STREAM_WAIT_VALUE_GEQ) v = pick(&g->s, 2) ? v : 0;
        gcall(g, k, SHIM_ID_cuStreamWaitValue32_v2, a, 4);
        g->plain = 0;
        return;
    }
    need(g, k, K_DEV);
    uint64_t room, d = devptr(g, k, &room), st = stream(g, k), v = take(&g->s, 4), fl = 0;
    d &= ~(uint64_t)3;
    const void *a[] = {&st, &d, &v, &fl};
    if (pick(&g->s, 2)) gcall(g, k, SHIM_ID_cuStreamWriteValue32_v2, a, 4);
    if (pick(&g->s, 2)) return;
    fl = CU_STREAM_WAIT_VALUE_GEQ;
    if (odd(g)) fl = take(&g->s, 1) & 3; /* any condition on any value */
    gcall(g, k, SHIM_ID_cuStreamWaitValue32_v2, a, 4);
}

/* A host function. Its sequence numbers go up, by one as the shim's do or by a jump; any
 * number only with known(): out of order, a departed client's release cannot let its streams
 * go (tests/fuzz/repro_hostfn_seq.c). */
static void op_host_func(struct gen *g, struct cl *k)
{
    int any = known();
    if (one_in(&g->s, 16)) k->hostfn += pick(&g->s, 1000);
    struct chan_host_func m = {.stream = stream(g, k), .seq = ++k->hostfn};
    if (any && one_in(&g->s, 16)) m.seq = (uint32_t)take(&g->s, 4);
    g->plain = !any; /* a scribbled number is one out of order too */
    send_rec(g, k, CHAN_OP_HOST_FUNC, one_in(&g->s, 8) ? FLAG_ONLY : 0, (uint8_t *)&m, sizeof(m),
             sizeof(m), NULL, 0, NULL);
    g->plain = 0;
}

static void op_host_alloc(struct gen *g, struct cl *k)
{
    struct chan_host_alloc m = {.bytes = num(g, 4096u << pick(&g->s, 6)), .flags = pick(&g->s, 16)};
    if (one_in(&g->s, 4)) m.flags = CHAN_HOST_MANAGED | (1u + pick(&g->s, 3));
    /* Migrating managed memory (server/memory/migrate.c) half the time: its reply is longer. */
    if ((m.flags & CHAN_HOST_MANAGED) && pick(&g->s, 2)) m.flags |= CHAN_HOST_MIGRATE;
    if (one_in(&g->s, 16)) {
        m.attempt = 1 + pick(&g->s, 3);
        m.avoid = take(&g->s, 8);
    }
    uint64_t out[4] = {0, 0, 0, 0};
    if (send_rec(g, k, CHAN_OP_HOST_ALLOC, 1, (uint8_t *)&m, sizeof(m), sizeof(m), out, sizeof(out),
                 NULL) == CUDA_SUCCESS &&
        out[0])
        add(k, K_PINNED, out[0], m.bytes, (int32_t)m.flags, 0);
}

static void op_host_free(struct gen *g, struct cl *k)
{
    struct obj *x;
    uint64_t a = name(g, k, K_PINNED, &x);
    if (send_rec(g, k, CHAN_OP_HOST_FREE, 1, (uint8_t *)&a, sizeof(a), sizeof(a), NULL, 0, NULL) ==
            CUDA_SUCCESS &&
        x)
        x->live = 0;
}

/* cuMemHostRegister as the shim does it: the pages go into a memfd sent before the record
 * (here an address no mapping holds, which the server maps), or its unregistration. */
static void op_host_register(struct gen *g, struct cl *k)
{
    struct chan_host_register m = {.what = CHAN_HR_REGISTER,
                                   .flags =
                                       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP};
    struct obj *x = NULL;
    if (one_in(&g->s, 3)) {
        m.what = CHAN_HR_UNREGISTER;
        m.addr = name(g, k, K_REG, &x);
        if (send_rec(g, k, CHAN_OP_HOST_REGISTER, 1, (uint8_t *)&m, sizeof(m), sizeof(m), NULL, 0,
                     NULL) == CUDA_SUCCESS &&
            x)
            x->live = 0;
        return;
    }
    m.bytes = 4096u << pick(&g->s, 4);
    void *at = mmap(NULL, m.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) return;
    munmap(at, m.bytes);
    m.addr = (uint64_t)(uintptr_t)at;
    if (odd(g)) m.flags = (uint32_t)take(&g->s, 4);
    int fd = -1;
    switch (pick(&g->s, 8)) {
    case 0:
        break; /* no descriptor */
    case 1:
        fd = memfd_create("fuzz-unsealed", MFD_CLOEXEC);
        break;
    default:
        fd = memfd_create("fuzz-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        break;
    }
    if (fd >= 0 && ftruncate(fd, (off_t)m.bytes) != 0) {
        close(fd);
        return;
    }
    if (fd >= 0 && !odd(g)) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    uint64_t asked = m.bytes;
    if (odd(g)) m.bytes = num(g, m.bytes);
    if (odd(g)) m.addr += 1 + pick(&g->s, 4095);
    fh_send_fd(k->fh, fd);
    if (fd >= 0) close(fd);
    if (send_rec(g, k, CHAN_OP_HOST_REGISTER, 1, (uint8_t *)&m, sizeof(m), sizeof(m), NULL, 0,
                 NULL) == CUDA_SUCCESS)
        add(k, K_REG, m.addr, asked, 0, 0);
}

static void op_array(struct gen *g, struct cl *k)
{
    if (one_in(&g->s, 3)) {
        struct obj *x;
        uint64_t a = name(g, k, K_ARRAY, &x);
        int theirs = !x && a && fh_owns(other(g, k)->fh, SHIM_HT_CUarray, a) &&
                     !fh_owns(k->fh, SHIM_HT_CUarray, a);
        const void *av[] = {&a};
        CUresult r = gcall(g, k, SHIM_ID_cuArrayDestroy, av, 1);
        if (r == CUDA_SUCCESS && theirs) isolation(g, "cuArrayDestroy", a);
        if (r == CUDA_SUCCESS && x) x->live = 0;
        return;
    }
    static const CUarray_format fmts[] = {CU_AD_FORMAT_UNSIGNED_INT8, CU_AD_FORMAT_UNSIGNED_INT32,
                                          CU_AD_FORMAT_FLOAT, CU_AD_FORMAT_HALF};
    static const unsigned fbytes[] = {1, 4, 4, 2};
    unsigned f = pick(&g->s, 4), ch = 1u << pick(&g->s, 3);
    uint64_t arr = 0;
    void *pa = &arr;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = num(g, 1 + pick(&g->s, 64)),
                                  .Height = pick(&g->s, 3) ? 1 + pick(&g->s, 16) : 0,
                                  .Depth = pick(&g->s, 3) ? 0 : 1 + pick(&g->s, 4),
                                  .Format = fmts[f],
                                  .NumChannels = ch};
    if (odd(g)) d3.Flags = (unsigned)take(&g->s, 4);
    CUresult r;
    if (d3.Depth) {
        const CUDA_ARRAY3D_DESCRIPTOR *pd = &d3;
        const void *a[] = {&pa, &pd};
        r = gcall(g, k, SHIM_ID_cuArray3DCreate_v2, a, 2);
    } else {
        CUDA_ARRAY_DESCRIPTOR d2 = {.Width = d3.Width,
                                    .Height = d3.Height,
                                    .Format = d3.Format,
                                    .NumChannels = d3.NumChannels};
        const CUDA_ARRAY_DESCRIPTOR *pd = &d2;
        const void *a[] = {&pa, &pd};
        r = gcall(g, k, SHIM_ID_cuArrayCreate_v2, a, 2);
    }
    if (r == CUDA_SUCCESS && arr)
        add(k, K_ARRAY, arr, d3.Depth ? d3.Depth : 1, (int32_t)(d3.Width * fbytes[f] * ch),
            (int32_t)(d3.Height ? d3.Height : 1));
}

/* One side of a copy: its kind and address, and the extent it holds (row bytes, rows,
 * slices) for the geometry to fit in. */
static void side(struct gen *g, struct cl *k, struct chan_copy_side *sd, uint64_t *w, uint64_t *h,
                 uint64_t *d)
{
    struct obj *x = NULL;
    memset(sd, 0, sizeof(*sd));
    sd->device = -1;
    switch (pick(&g->s, 5)) {
    case 0:
        sd->kind = CHAN_MEM_ARRAY;
        sd->addr = name(g, k, K_ARRAY, &x);
        *w = x ? (uint64_t)x->a : 64;
        *h = x ? (uint64_t)x->b : 1;
        *d = x ? x->size : 1;
        return;
    case 1:
        sd->kind = CHAN_MEM_PINNED;
        sd->addr = name(g, k, one_in(&g->s, 3) ? K_REG : K_PINNED, &x);
        break;
    case 2:
        sd->kind = CHAN_MEM_STAGED;
        *w = 1u << 20;
        *h = 16;
        *d = 4;
        return;
    default:
        sd->kind = CHAN_MEM_DEVICE;
        sd->addr = name(g, k, one_in(&g->s, 4) ? K_MAP : K_DEV, &x);
        if (odd(g)) sd->device = (int32_t)pick(&g->s, 3) - 1;
        break;
    }
    uint64_t size = x ? x->size : 4096;
    *w = size < 256 ? size : 256;
    *h = size / (*w ? *w : 1);
    *d = 1;
    if (*h > 4) {
        *h /= 2;
        *d = 2;
    }
}

/* A copy of every direction and dimension: sides from what the client holds, geometry
 * fitting both (mostly), with pitches, offsets and flags; pageable data inline or through
 * the staging slots (within CHAN_NSLOTS chunks: the target feeds them at once). */
static void op_copy(struct gen *g, struct cl *k)
{
    static uint8_t buf[CHAN_REC_MAX];
    need(g, k, K_DEV);
    struct chan_copy m;
    uint64_t w1, h1, d1, w2, h2, d2;
    side(g, k, &m.src, &w1, &h1, &d1);
    side(g, k, &m.dst, &w2, &h2, &d2);
    if (m.src.kind == CHAN_MEM_STAGED && m.dst.kind == CHAN_MEM_STAGED && !odd(g))
        m.dst.kind = CHAN_MEM_DEVICE;
    uint64_t wmax = w1 < w2 ? w1 : w2, hmax = h1 < h2 ? h1 : h2, dmax = d1 < d2 ? d1 : d2;
    m.width = 1 + pick(&g->s, (uint32_t)(wmax ? (wmax < 65536 ? wmax : 65536) : 1));
    m.height = 1 + pick(&g->s, (uint32_t)(hmax ? (hmax < 64 ? hmax : 64) : 1));
    m.depth = 1 + pick(&g->s, (uint32_t)(dmax ? (dmax < 4 ? dmax : 4) : 1));
    struct chan_copy_side *sides[2] = {&m.src, &m.dst};
    for (int i = 0; i < 2; i++) {
        struct chan_copy_side *sd = sides[i];
        sd->pitch = m.width;
        sd->height = m.height;
        if (one_in(&g->s, 4)) {
            sd->x = pick(&g->s, 8);
            sd->pitch = m.width + sd->x + pick(&g->s, 2) * 32;
        }
        if (odd(g)) {
            sd->pitch = num(g, sd->pitch);
            sd->height = num(g, sd->height);
            sd->x = num(g, sd->x);
            sd->y = num(g, 0);
            sd->z = num(g, 0);
        }
    }
    if (odd(g)) {
        m.width = num(g, m.width);
        m.height = num(g, m.height);
        m.depth = num(g, m.depth);
    }
    m.flags = pick(&g->s, 2) ? CHAN_CF_ASYNC : 0;
    if (one_in(&g->s, 8)) m.flags |= CHAN_CF_UNALIGNED;
    if (one_in(&g->s, 4)) m.flags |= CHAN_CF_COMPLETE;
    if (one_in(&g->s, 16)) m.flags |= CHAN_CF_PEER;
    m.stream = m.flags & CHAN_CF_ASYNC ? stream(g, k) : 0;
    int staged = m.src.kind == CHAN_MEM_STAGED || m.dst.kind == CHAN_MEM_STAGED;
    uint64_t total;
    int wraps = __builtin_mul_overflow(m.width, m.height, &total) ||
                __builtin_mul_overflow(total, m.depth, &total);
    uint32_t len = sizeof(m);
    m.first_chunk = fh_chunk_seq(k->fh);
    if (staged && !wraps && total <= CHAN_INLINE_MAX && (pick(&g->s, 3) || one_in(&g->s, 8))) {
        m.flags |= CHAN_CF_INLINE;
        if (m.src.kind == CHAN_MEM_STAGED) {
            memset(buf + sizeof(m), (int)take(&g->s, 1), total);
            len += (uint32_t)total;
        }
    } else if (staged && (wraps || chan_copy_nchunks(m.width, m.height, m.depth, CHAN_SLOT_SIZE) >
                                       CHAN_NSLOTS)) {
        return; /* through the slots only what this client can feed at once */
    }
    if (odd(g)) m.first_chunk += 1 + pick(&g->s, 8); /* out of step: the client is dropped */
    int reply = !(m.flags & CHAN_CF_ASYNC) || m.dst.kind == CHAN_MEM_STAGED || pick(&g->s, 2);
    memcpy(buf, &m, sizeof(m));
    send_rec(g, k, CHAN_OP_COPY, reply, buf, len, sizeof(buf) - 16, NULL, 0, NULL);
}

/* ---- modules, functions, launches */

/* Uploads image `which` (odd: scribbled on or cut) and loads it as a module or library. */
static void load_image(struct gen *g, struct cl *k, int which, uint32_t kind)
{
    static uint8_t img[1 << 17];
    size_t n = image_len[which];
    if (n > sizeof(img) - 64) return;
    memcpy(img, images[which], n);
    int mangled = odd(g);
    if (mangled) {
        for (int i = 0, c = 1 + (int)pick(&g->s, 8); i < c; i++)
            img[pick(&g->s, (uint32_t)n)] = (uint8_t)take(&g->s, 1);
        if (one_in(&g->s, 2)) n = pick(&g->s, (uint32_t)n);
    }
    int before = g->mangles;
    /* Uploaded in records of at most what a record holds, as the shim does. */
    const size_t max = CHAN_REC_MAX - sizeof(struct chan_rec) - 64;
    size_t piece = pick(&g->s, 4) ? max : 1 + pick(&g->s, 4096);
    if (piece < n / 16) piece = n / 16; /* at most 16 records */
    for (size_t off = 0; off < n; off += piece) {
        size_t c = n - off < piece ? n - off : piece;
        send_rec(g, k, CHAN_OP_BLOB, 0, img + off, (uint32_t)c, (uint32_t)c, NULL, 0, NULL);
    }
    struct {
        struct chan_module_load m;
        struct chan_jit_opt o[2];
    } req = {.m = {.kind = kind, .image_size = num(g, n)}};
    if (odd(g)) req.m.kind = (uint32_t)take(&g->s, 4);
    if (one_in(&g->s, 4)) {
        req.m.njit = 1 + pick(&g->s, 2);
        for (uint32_t i = 0; i < req.m.njit; i++)
            req.o[i] = (struct chan_jit_opt){.option = pick(&g->s, 12), .value = num(g, 256)};
    }
    struct chan_module_loaded got = {0};
    if (send_rec(g, k, CHAN_OP_MODULE_LOAD, 1, (uint8_t *)&req,
                 (uint32_t)(sizeof(req.m) + req.m.njit * sizeof(struct chan_jit_opt)), sizeof(req),
                 &got, sizeof(got), NULL) == CUDA_SUCCESS &&
        got.handle)
        add(k, K_MODULE, got.handle, req.m.kind,
            mangled || req.m.image_size != n || g->mangles != before ? IMG_MANGLED : which,
            (int32_t)req.m.kind);
}

static void op_module_load(struct gen *g, struct cl *k)
{
    load_image(g, k, (int)pick(&g->s, IMG_NIMAGES),
               one_in(&g->s, 4) ? CHAN_IMAGE_LIBRARY : CHAN_IMAGE_MODULE);
}

static void op_get_function(struct gen *g, struct cl *k)
{
    static uint8_t buf[512];
    struct obj *mod;
    int kd = (int)pick(&g->s, NKDEFS);
    struct chan_lookup m = {.handle = name(g, k, K_MODULE, &mod), .kind = CHAN_H_MODULE};
    if (mod && mod->b == CHAN_IMAGE_LIBRARY) m.kind = CHAN_H_LIBRARY;
    const char *nm = kdefs[kd].name;
    if (odd(g)) nm = "no_such_kernel";
    m.name_len = (uint32_t)strlen(nm) + 1;
    memcpy(buf, &m, sizeof(m));
    memcpy(buf + sizeof(m), nm, m.name_len);
    uint32_t len = (uint32_t)sizeof(m) + m.name_len;
    if (odd(g)) {
        ((struct chan_lookup *)buf)->name_len = (uint32_t)num(g, m.name_len);
        if (one_in(&g->s, 2)) buf[len - 1] = 'x';
    }
    static uint8_t out[CHAN_LANE_DATA];
    uint32_t got = 0;
    int before = g->mangles;
    CUresult r =
        send_rec(g, k, CHAN_OP_GET_FUNCTION, 1, buf, len, sizeof(buf), out, sizeof(out), &got);
    struct chan_function f;
    if (r != CUDA_SUCCESS || got < sizeof(f)) return;
    memcpy(&f, out, sizeof(f));
    int ours = mod && mod->a == kdefs[kd].image && nm == kdefs[kd].name && g->mangles == before &&
               f.nparams == strlen(kdefs[kd].params);
    if (ours && !layout[kd].known && f.nparams <= 16 && got >= sizeof(f) + 8 * f.nparams) {
        layout[kd].n = f.nparams;
        layout[kd].bytes = f.param_bytes;
        for (uint32_t i = 0; i < f.nparams; i++) {
            memcpy(&layout[kd].off[i], out + sizeof(f) + 8 * i, 4);
            memcpy(&layout[kd].size[i], out + sizeof(f) + 8 * i + 4, 4);
        }
        layout[kd].known = 1;
    }
    /* A function of a mangled image is never launched: who knows what its name means. */
    if (f.handle) add(k, K_FUNC, f.handle, 0, ours ? kd : -1, 0);
}

static void op_module_misc(struct gen *g, struct cl *k)
{
    struct obj *x;
    uint64_t mod = name(g, k, K_MODULE, &x);
    switch (pick(&g->s, 3)) {
    case 0: {
        struct chan_handle m = {.handle = mod,
                                .kind = x && x->b == CHAN_IMAGE_LIBRARY ? CHAN_H_LIBRARY
                                                                        : CHAN_H_MODULE,
                                .arg = (uint32_t)num(g, 16)}; /* at most this many */
        static uint8_t out[CHAN_LANE_DATA];
        send_rec(g, k, CHAN_OP_ENUM_FUNCTIONS, 1, (uint8_t *)&m, sizeof(m), sizeof(m), out,
                 sizeof(out), NULL);
        break;
    }
    case 1: {
        static const char *const globals[] = {"g_counter", "g_table", "g_offset", "nothing"};
        uint64_t d = 0, bytes = 0;
        void *pd = &d, *pb = &bytes;
        const char *nm = globals[pick(&g->s, 4)];
        const void *a[] = {&pd, &pb, &mod, &nm};
        if (gcall(g, k, SHIM_ID_cuModuleGetGlobal_v2, a, 4) == CUDA_SUCCESS && d && bytes)
            add(k, K_DEV, d, bytes, 2, 0);
        break;
    }
    default: {
        int theirs = !x && mod && fh_owns(other(g, k)->fh, SHIM_HT_CUmodule, mod) &&
                     !fh_owns(k->fh, SHIM_HT_CUmodule, mod);
        const void *a[] = {&mod};
        CUresult r = gcall(g, k, SHIM_ID_cuModuleUnload, a, 1);
        if (r == CUDA_SUCCESS && theirs) isolation(g, "cuModuleUnload", mod);
        if (r == CUDA_SUCCESS && x) {
            x->live = 0;
            for (int i = 0; i < k->n; i++) /* its functions and globals go with it */
                if (k->o[i].kind == K_FUNC || (k->o[i].kind == K_DEV && k->o[i].a == 2))
                    k->o[i].live = 0;
        }
        break;
    }
    }
}

/* A function to launch: the client's own with its kernel, or another's, or anything (whose
 * parameters are then packed for a kernel that writes nothing). */
static uint64_t function(struct gen *g, struct cl *k, int *kd)
{
    struct obj *x = NULL;
    uint64_t f = name(g, k, K_FUNC, &x);
    *kd = x ? x->a : -1;
    if (!x && f) {
        struct cl *o = other(g, k);
        for (int i = 0; i < o->n; i++)
            if (o->o[i].kind == K_FUNC && o->o[i].v == f) *kd = o->o[i].a;
    }
    return f;
}

/* Parameters for function kd by its layout (anything for a kernel with no pointer, now and
 * then), with bytes more or fewer now and then. A function whose kernel is not known gets
 * none: were it one with pointers, the driver refuses the launch rather than run it with
 * made-up ones. */
static uint32_t params(struct gen *g, struct cl *k, int kd, uint8_t *p, uint32_t room)
{
    if (kd < 0) return 0;
    uint32_t n = pack_params(g, k, kd, p, room);
    if (!tame(kd) && layout[kd].known && one_in(&g->s, 4))
        for (uint32_t i = 0; i < n; i++)
            p[i] = (uint8_t)take(&g->s, 1);
    if (one_in(&g->s, 16)) {
        uint32_t more = pick(&g->s, 64);
        if (n + more <= room) {
            memset(p + n, 0, more);
            n += more;
        }
    }
    if (n && odd(g)) n = pick(&g->s, n); /* too few: the driver refuses them */
    return n;
}

static void op_launch(struct gen *g, struct cl *k)
{
    static uint8_t buf[8192];
    need(g, k, K_FUNC);
    struct chan_launch m = {.stream = stream(g, k)};
    int kd;
    m.func = function(g, k, &kd);
    config(g, kd, m.grid, m.block, &m.smem);
    m.cooperative = one_in(&g->s, 16);
    CUlaunchAttribute at[4];
    memset(at, 0, sizeof(at));
    if (one_in(&g->s, 4)) {
        m.nattrs = 1 + pick(&g->s, 3);
        static const CUlaunchAttributeID ids[] = {CU_LAUNCH_ATTRIBUTE_PRIORITY,
                                                  CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                                                  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                                  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
                                                  CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
                                                  CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
                                                  CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN};
        for (uint32_t i = 0; i < m.nattrs; i++) {
            at[i].id = ids[pick(&g->s, sizeof(ids) / sizeof(ids[0]))];
            at[i].value.priority = (int)pick(&g->s, 4);
            if (at[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
                at[i].value.clusterDim.x = 1;
                at[i].value.clusterDim.y = 1;
                at[i].value.clusterDim.z = 1;
            }
        }
    }
    uint32_t off = sizeof(m) + m.nattrs * (uint32_t)sizeof(CUlaunchAttribute);
    memcpy(buf + sizeof(m), at, m.nattrs * sizeof(CUlaunchAttribute));
    m.param_bytes = params(g, k, kd, buf + off, sizeof(buf) - off - 64);
    memcpy(buf, &m, sizeof(m));
    g->keep = tame(kd);
    send_rec(g, k, CHAN_OP_LAUNCH, one_in(&g->s, 8) ? FLAG_ONLY : 0, buf, off + m.param_bytes,
             sizeof(buf) - 16, NULL, 0, NULL);
    g->keep = 0;
}

/* Cluster occupancy: a described call whose configuration points to its attributes. */
static void op_occupancy(struct gen *g, struct cl *k)
{
    CUlaunchAttribute a[2];
    CUlaunchConfig cfg;
    /* grid, block and shared memory: the configuration's first seven words */
    uint32_t dims[7];
    int kd, out;
    _Static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == 6 * sizeof(uint32_t), "layout");
    memset(a, 0, sizeof(a));
    memset(&cfg, 0, sizeof(cfg));
    CUfunction f = (CUfunction)(uintptr_t)function(g, k, &kd);
    config(g, -1, dims, dims + 3, &dims[6]);
    memcpy(&cfg, dims, sizeof(dims));
    cfg.hStream = (CUstream)(uintptr_t)stream(g, k);
    cfg.attrs = a;
    cfg.numAttrs = pick(&g->s, 3);
    for (uint32_t i = 0; i < cfg.numAttrs; i++) {
        a[i].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        a[i].value.clusterDim.x = 1 + pick(&g->s, 4);
        a[i].value.clusterDim.y = 1;
        a[i].value.clusterDim.z = 1;
    }
    int *po = &out;
    const CUlaunchConfig *pc = &cfg;
    const void *argv[] = {&po, &f, &pc};
    gcall(g, k,
          pick(&g->s, 2) ? SHIM_ID_cuOccupancyMaxActiveClusters
                         : SHIM_ID_cuOccupancyMaxPotentialClusterSize,
          argv, 3);
}

/* ---- graphs */

static void op_graph_create(struct gen *g, struct cl *k)
{
    uint64_t gr = 0, fl = odd(g) ? take(&g->s, 4) : 0;
    void *pg = &gr;
    const void *a[] = {&pg, &fl};
    if (gcall(g, k, SHIM_ID_cuGraphCreate, a, 2) == CUDA_SUCCESS && gr)
        add(k, K_GRAPH, gr, 0, 0, 0);
}

static void op_graph_destroy(struct gen *g, struct cl *k)
{
    struct obj *x;
    uint64_t gr = name(g, k, K_GRAPH, &x);
    int theirs = !x && gr && fh_owns(other(g, k)->fh, SHIM_HT_CUgraph, gr) &&
                 !fh_owns(k->fh, SHIM_HT_CUgraph, gr);
    const void *a[] = {&gr};
    CUresult r = gcall(g, k, SHIM_ID_cuGraphDestroy, a, 1);
    if (r == CUDA_SUCCESS && theirs) isolation(g, "cuGraphDestroy", gr);
    if (r == CUDA_SUCCESS && x) graph_gone(k, x);
}

/* Up to 3 dependencies among the graph's nodes (odd: any node); their count in *n. */
static void deps(struct gen *g, struct cl *k, struct obj *gr, uint64_t *d, uint64_t *n)
{
    int gi = gr ? (int)(gr - k->o) : -1, cand[MAXOBJ], nc = 0;
    for (int i = 0; i < k->n; i++)
        if (k->o[i].live && k->o[i].kind == K_NODE && k->o[i].b == gi) cand[nc++] = i;
    *n = pick(&g->s, nc < 3 ? (uint32_t)nc + 1 : 4);
    if (odd(g)) *n = pick(&g->s, 4);
    for (uint64_t i = 0; i < *n; i++)
        d[i] = nc && !odd(g) ? k->o[cand[pick(&g->s, (uint32_t)nc)]].v : name(g, k, K_NODE, NULL);
}

/* A memset node's parameters, over memory the client holds (mostly). */
static void memset_params(struct gen *g, struct cl *k, CUDA_MEMSET_NODE_PARAMS *p)
{
    uint64_t room;
    memset(p, 0, sizeof(*p));
    p->dst = devptr(g, k, &room);
    p->elementSize = 1u << pick(&g->s, 3);
    p->height = 1 + pick(&g->s, 3);
    p->width = num(g, (room / p->height) / p->elementSize / 2 + 1);
    p->pitch = num(g, p->width * p->elementSize + 16 * pick(&g->s, 3));
    p->value = (unsigned)take(&g->s, 4);
    if (odd(g)) p->elementSize = (unsigned)take(&g->s, 1);
}

/* A 3D copy's parameters between what the client holds (device, arrays, pinned memory). */
static void memcpy_params(struct gen *g, struct cl *k, CUDA_MEMCPY3D *p)
{
    memset(p, 0, sizeof(*p));
    uint64_t w = 1 + pick(&g->s, 256), room;
    for (int side_ = 0; side_ < 2; side_++) {
        CUmemorytype t;
        uint64_t a = 0;
        CUarray arr = NULL;
        switch (pick(&g->s, 4)) {
        case 0: {
            struct obj *x;
            arr = (CUarray)(uintptr_t)name(g, k, K_ARRAY, &x);
            t = CU_MEMORYTYPE_ARRAY;
            if (x && (uint64_t)x->a < w) w = (uint64_t)x->a ? (uint64_t)x->a : 1;
            break;
        }
        case 1: {
            struct obj *x;
            a = name(g, k, K_PINNED, &x);
            t = CU_MEMORYTYPE_HOST;
            if (x && x->size < w) w = x->size ? x->size : 1;
            break;
        }
        default:
            a = devptr(g, k, &room);
            t = CU_MEMORYTYPE_DEVICE;
            if (room < w) w = room ? room : 1;
            break;
        }
        if (odd(g)) t = (CUmemorytype)take(&g->s, 1);
        if (side_ == 0) {
            p->srcMemoryType = t;
            p->srcDevice = a;
            p->srcHost = (const void *)(uintptr_t)a;
            p->srcArray = arr;
            p->srcPitch = num(g, 256);
        } else {
            p->dstMemoryType = t;
            p->dstDevice = a;
            p->dstHost = (void *)(uintptr_t)a;
            p->dstArray = arr;
            p->dstPitch = num(g, 256);
        }
    }
    p->WidthInBytes = num(g, w);
    p->Height = num(g, 1);
    p->Depth = num(g, 1);
    if (odd(g)) {
        p->srcXInBytes = num(g, 0);
        p->dstY = num(g, 0);
    }
}

static void op_graph_add(struct gen *g, struct cl *k)
{
    struct obj *gr;
    need(g, k, K_GRAPH);
    uint64_t graph = name(g, k, K_GRAPH, &gr), node = 0, dep[4], nd, ctx = k->ctx;
    void *pn = &node;
    const void *pdep = dep;
    deps(g, k, gr, dep, &nd);
    if (odd(g)) ctx = pick(&g->s, 4);
    int type = (int)pick(&g->s, 9);
    CUresult r = NO_REPLY;
    static const int needs[9] = {0, K_DEV, K_DEV, K_EVENT, K_GRAPH, 0, K_FUNC, 0, 0};
    if (needs[type]) need(g, k, needs[type]);
    switch (type) {
    case 0: {
        const void *a[] = {&pn, &graph, &pdep, &nd};
        r = gcall(g, k, SHIM_ID_cuGraphAddEmptyNode, a, 4);
        type = CU_GRAPH_NODE_TYPE_EMPTY;
        break;
    }
    case 1: {
        CUDA_MEMSET_NODE_PARAMS p;
        memset_params(g, k, &p);
        const void *pp = &p;
        const void *a[] = {&pn, &graph, &pdep, &nd, &pp, &ctx};
        r = gcall(g, k, SHIM_ID_cuGraphAddMemsetNode, a, 6);
        type = CU_GRAPH_NODE_TYPE_MEMSET;
        break;
    }
    case 2: {
        CUDA_MEMCPY3D p;
        memcpy_params(g, k, &p);
        const void *pp = &p;
        const void *a[] = {&pn, &graph, &pdep, &nd, &pp, &ctx};
        r = gcall(g, k, SHIM_ID_cuGraphAddMemcpyNode, a, 6);
        type = CU_GRAPH_NODE_TYPE_MEMCPY;
        break;
    }
    case 3: {
        uint64_t ev = name(g, k, K_EVENT, NULL);
        const void *a[] = {&pn, &graph, &pdep, &nd, &ev};
        int rec = pick(&g->s, 2);
        r = gcall(g, k, rec ? SHIM_ID_cuGraphAddEventRecordNode : SHIM_ID_cuGraphAddEventWaitNode,
                  a, 5);
        type = rec ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT;
        break;
    }
    case 4: {
        uint64_t child = name(g, k, K_GRAPH, NULL);
        const void *a[] = {&pn, &graph, &pdep, &nd, &child};
        r = gcall(g, k, SHIM_ID_cuGraphAddChildGraphNode, a, 5);
        type = CU_GRAPH_NODE_TYPE_GRAPH;
        break;
    }
    case 5: {
        if (pick(&g->s, 2)) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            memset(&p, 0, sizeof(p));
            p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            p.poolProps.location.id = odd(g) ? 1 : 0;
            p.bytesize = num(g, 4096u << pick(&g->s, 5));
            if (odd(g)) p.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
            void *pp = &p;
            const void *a[] = {&pn, &graph, &pdep, &nd, &pp};
            r = gcall(g, k, SHIM_ID_cuGraphAddMemAllocNode, a, 5);
            if (r == CUDA_SUCCESS && p.dptr) add(k, K_GMEM, p.dptr, p.bytesize, 0, 0);
            type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        } else {
            uint64_t room, d = pick(&g->s, 4) ? name(g, k, K_GMEM, NULL) : devptr(g, k, &room);
            const void *a[] = {&pn, &graph, &pdep, &nd, &d};
            r = gcall(g, k, SHIM_ID_cuGraphAddMemFreeNode, a, 5);
            type = CU_GRAPH_NODE_TYPE_MEM_FREE;
        }
        break;
    }
    case 6: {
        static uint8_t buf[4096];
        struct chan_kernel_node m = {.what = CHAN_KN_ADD, .graph = graph, .ndeps = (uint32_t)nd};
        int kd;
        m.func = function(g, k, &kd);
        config(g, kd, m.grid, m.block, &m.smem);
        if (odd(g)) m.ndeps = (uint32_t)num(g, nd);
        uint32_t off = sizeof(m) + 8 * (uint32_t)nd;
        memcpy(buf + sizeof(m), dep, 8 * nd);
        m.param_bytes = params(g, k, kd, buf + off, sizeof(buf) - off - 64);
        memcpy(buf, &m, sizeof(m));
        uint64_t out = 0;
        g->keep = tame(kd);
        r = send_rec(g, k, CHAN_OP_KERNEL_NODE, 1, buf, off + m.param_bytes, sizeof(buf) - 16, &out,
                     sizeof(out), NULL);
        g->keep = 0;
        node = out;
        type = CU_GRAPH_NODE_TYPE_KERNEL;
        break;
    }
    case 7: {
        struct {
            struct chan_host_node m;
            uint64_t d[4];
        } q = {.m = {.what = CHAN_HN_ADD,
                     .ndeps = (uint32_t)nd,
                     .graph = graph,
                     .fn = take(&g->s, 8) | 1,
                     .user = take(&g->s, 8)}};
        memcpy(q.d, dep, 8 * nd);
        uint64_t out = 0;
        r = send_rec(g, k, CHAN_OP_HOST_NODE, 1, (uint8_t *)&q, (uint32_t)(sizeof(q.m) + 8 * nd),
                     sizeof(q), &out, sizeof(out), NULL);
        node = out;
        type = CU_GRAPH_NODE_TYPE_HOST;
        break;
    }
    default: {
        /* A conditional node: a handle made for the graph first (a WHILE one's default is
         * never 1: nothing in its body may be able to end the loop). */
        uint64_t h = 0, dflt = pick(&g->s, 2), fl = pick(&g->s, 2);
        uint32_t ct = pick(&g->s, 3);
        if (ct == CU_GRAPH_COND_TYPE_WHILE) dflt = 0;
        struct obj *have = own(&g->s, k, K_COND);
        if (have && have->b == (int32_t)(gr ? gr - k->o : -1) && pick(&g->s, 2) &&
            (ct != CU_GRAPH_COND_TYPE_WHILE || !have->a)) {
            h = have->v;
        } else {
            void *ph = &h;
            const void *a[] = {&ph, &graph, &ctx, &dflt, &fl};
            if (gcall(g, k, SHIM_ID_cuGraphConditionalHandleCreate, a, 5) == CUDA_SUCCESS && gr)
                add(k, K_COND, h, 0, (int32_t)dflt, (int32_t)(gr - k->o));
        }
        struct {
            struct chan_cond_node m;
            uint64_t d[4];
        } q = {.m = {.graph = graph,
                     .handle = h,
                     .type = ct,
                     .size = ct == CU_GRAPH_COND_TYPE_SWITCH ? 1 + pick(&g->s, 4)
                                                             : 1 + one_in(&g->s, 3),
                     .ctx = (uint32_t)ctx,
                     .ndeps = (uint32_t)nd}};
        if (odd(g)) q.m.size = (uint32_t)num(g, q.m.size);
        if (odd(g)) q.m.type = (uint32_t)take(&g->s, 4);
        memcpy(q.d, dep, 8 * nd);
        uint64_t out[2 + 8];
        uint32_t got = 0;
        r = send_rec(g, k, CHAN_OP_COND_NODE, 1, (uint8_t *)&q, (uint32_t)(sizeof(q.m) + 8 * nd),
                     sizeof(q), out, sizeof(out), &got);
        if (r == CUDA_SUCCESS && got >= 16) {
            node = out[0];
            for (uint32_t i = 0; i < q.m.size && 16 + 8 * (i + 1) <= got; i++)
                add(k, K_GRAPH, out[2 + i], 0, 1, 0);
        }
        type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        break;
    }
    }
    if (r == CUDA_SUCCESS && node && gr) add(k, K_NODE, node, 0, type, (int32_t)(gr - k->o));
}

/* Reading and changing a graph's nodes and edges. */
static void op_graph_node(struct gen *g, struct cl *k)
{
    struct obj *x;
    need(g, k, K_NODE);
    uint64_t node = name(g, k, K_NODE, &x), graph = name(g, k, K_GRAPH, NULL);
    if (x && !odd(g)) graph = k->o[x->b].v;
    switch (pick(&g->s, 14)) {
    case 0: {
        const void *a[] = {&node};
        if (gcall(g, k, SHIM_ID_cuGraphDestroyNode, a, 1) == CUDA_SUCCESS && x) x->live = 0;
        break;
    }
    case 1:
    case 2: {
        uint64_t from[2], to[2], n = 1 + pick(&g->s, 2);
        for (uint64_t i = 0; i < n; i++) {
            from[i] = name(g, k, K_NODE, NULL);
            to[i] = name(g, k, K_NODE, NULL);
        }
        const void *pf = from, *pt = to;
        const void *a[] = {&graph, &pf, &pt, &n};
        gcall(g, k,
              pick(&g->s, 2) ? SHIM_ID_cuGraphAddDependencies : SHIM_ID_cuGraphRemoveDependencies,
              a, 4);
        break;
    }
    case 3: {
        uint64_t nodes[32], num_ = num(g, 8);
        void *pn = nodes, *pc = &num_;
        if (num_ > 32) num_ = 32;
        const void *a[] = {&graph, &pn, &pc};
        gcall(g, k, pick(&g->s, 2) ? SHIM_ID_cuGraphGetNodes : SHIM_ID_cuGraphGetRootNodes, a, 3);
        break;
    }
    case 4: {
        uint64_t from[16], to[16], n = pick(&g->s, 17);
        void *pf = from, *pt = to, *pc = &n;
        const void *a[] = {&graph, &pf, &pt, &pc};
        gcall(g, k, SHIM_ID_cuGraphGetEdges, a, 4);
        break;
    }
    case 5: {
        uint64_t type = 0;
        void *pt = &type;
        const void *a[] = {&node, &pt};
        gcall(g, k, SHIM_ID_cuGraphNodeGetType, a, 2);
        break;
    }
    case 6: {
        CUDA_MEMSET_NODE_PARAMS p;
        if (pick(&g->s, 2)) {
            memset_params(g, k, &p);
            const void *pp = &p;
            const void *a[] = {&node, &pp};
            gcall(g, k, SHIM_ID_cuGraphMemsetNodeSetParams, a, 2);
        } else {
            void *pp = &p;
            const void *a[] = {&node, &pp};
            gcall(g, k, SHIM_ID_cuGraphMemsetNodeGetParams, a, 2);
        }
        break;
    }
    case 7: {
        CUDA_MEMCPY3D p;
        memcpy_params(g, k, &p);
        const void *pp = &p;
        const void *a[] = {&node, &pp};
        gcall(g, k, SHIM_ID_cuGraphMemcpyNodeSetParams, a, 2);
        break;
    }
    case 8: {
        uint64_t ev = name(g, k, K_EVENT, NULL);
        if (pick(&g->s, 2)) {
            const void *a[] = {&node, &ev};
            gcall(g, k, SHIM_ID_cuGraphEventRecordNodeSetEvent, a, 2);
        } else {
            void *pe = &ev;
            const void *a[] = {&node, &pe};
            gcall(g, k, SHIM_ID_cuGraphEventRecordNodeGetEvent, a, 2);
        }
        break;
    }
    case 9: {
        uint64_t child = 0;
        void *pc = &child;
        const void *a[] = {&node, &pc};
        gcall(g, k, SHIM_ID_cuGraphChildGraphNodeGetGraph, a, 2);
        break;
    }
    case 10:
    case 11: {
        /* A kernel node's parameters: set in the graph or in an exec, or read back. */
        static uint8_t buf[4096];
        struct chan_kernel_node m = {.what = CHAN_KN_SET + pick(&g->s, 3), .node = node};
        if (m.what == CHAN_KN_EXEC_SET) m.graph = name(g, k, K_EXEC, NULL);
        int kd;
        m.func = function(g, k, &kd);
        config(g, kd, m.grid, m.block, &m.smem);
        m.param_bytes = m.what == CHAN_KN_GET ? 0 : params(g, k, kd, buf + sizeof(m), 2048);
        memcpy(buf, &m, sizeof(m));
        static uint8_t out[CHAN_LANE_DATA];
        g->keep = tame(kd);
        send_rec(g, k, CHAN_OP_KERNEL_NODE, 1, buf, (uint32_t)sizeof(m) + m.param_bytes,
                 sizeof(buf) - 16, out, sizeof(out), NULL);
        g->keep = 0;
        break;
    }
    case 12: {
        /* A host node's function: read, set in the graph or in an exec. */
        struct chan_host_node m = {.what = CHAN_HN_GET + pick(&g->s, 3),
                                   .node = node,
                                   .fn = take(&g->s, 8) | 1,
                                   .user = take(&g->s, 8)};
        if (m.what == CHAN_HN_EXEC_SET) m.graph = name(g, k, K_EXEC, NULL);
        uint64_t out[2];
        send_rec(g, k, CHAN_OP_HOST_NODE, 1, (uint8_t *)&m, sizeof(m), sizeof(m), out, sizeof(out),
                 NULL);
        break;
    }
    default: {
        uint64_t clone = 0, found = 0;
        void *pc = &clone, *pf = &found;
        const void *a[] = {&pc, &graph};
        if (gcall(g, k, SHIM_ID_cuGraphClone, a, 2) == CUDA_SUCCESS && clone) {
            add(k, K_GRAPH, clone, 0, 0, 0);
            const void *b[] = {&pf, &node, &clone};
            gcall(g, k, SHIM_ID_cuGraphNodeFindInClone, b, 3);
        }
        break;
    }
    }
}

static void op_exec(struct gen *g, struct cl *k)
{
    struct obj *x;
    int what = (int)pick(&g->s, 8);
    if (what >= 2) need(g, k, K_EXEC);
    switch (what) {
    case 0:
    case 1: {
        struct obj *gr;
        need(g, k, K_NODE);
        uint64_t exec = 0, graph = name(g, k, K_GRAPH, &gr), fl = 0;
        if (one_in(&g->s, 8))
            fl =
                one_in(&g->s, 2) ? CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH : take(&g->s, 8);
        void *pe = &exec;
        const void *a[] = {&pe, &graph, &fl};
        if (gcall(g, k, SHIM_ID_cuGraphInstantiateWithFlags, a, 3) == CUDA_SUCCESS && exec)
            add(k, K_EXEC, exec, 0, 0, gr ? (int32_t)(gr - k->o) : -1);
        break;
    }
    case 2:
    case 3:
    case 4: {
        uint64_t exec = name(g, k, K_EXEC, NULL), st = stream(g, k);
        const void *a[] = {&exec, &st};
        gcall(g, k, one_in(&g->s, 4) ? SHIM_ID_cuGraphUpload : SHIM_ID_cuGraphLaunch, a, 2);
        break;
    }
    case 5: {
        uint64_t exec = name(g, k, K_EXEC, NULL), graph = name(g, k, K_GRAPH, NULL);
        CUgraphExecUpdateResultInfo info;
        memset(&info, 0, sizeof(info));
        void *pi = &info;
        const void *a[] = {&exec, &graph, &pi};
        gcall(g, k, SHIM_ID_cuGraphExecUpdate_v2, a, 3);
        break;
    }
    case 6: {
        uint64_t exec = name(g, k, K_EXEC, NULL), node = name(g, k, K_NODE, NULL), ctx = k->ctx;
        switch (pick(&g->s, 4)) {
        case 0: {
            CUDA_MEMSET_NODE_PARAMS p;
            memset_params(g, k, &p);
            const void *pp = &p;
            const void *a[] = {&exec, &node, &pp, &ctx};
            gcall(g, k, SHIM_ID_cuGraphExecMemsetNodeSetParams, a, 4);
            break;
        }
        case 1: {
            CUDA_MEMCPY3D p;
            memcpy_params(g, k, &p);
            const void *pp = &p;
            const void *a[] = {&exec, &node, &pp, &ctx};
            gcall(g, k, SHIM_ID_cuGraphExecMemcpyNodeSetParams, a, 4);
            break;
        }
        case 2: {
            uint64_t ev = name(g, k, K_EVENT, NULL);
            const void *a[] = {&exec, &node, &ev};
            gcall(g, k, SHIM_ID_cuGraphExecEventRecordNodeSetEvent, a, 3);
            break;
        }
        default: {
            uint64_t on = pick(&g->s, 2);
            const void *a[] = {&exec, &node, &on};
            gcall(g, k, SHIM_ID_cuGraphNodeSetEnabled, a, 3);
            break;
        }
        }
        break;
    }
    default: {
        uint64_t exec = name(g, k, K_EXEC, &x);
        int theirs = !x && exec && fh_owns(other(g, k)->fh, SHIM_HT_CUgraphExec, exec) &&
                     !fh_owns(k->fh, SHIM_HT_CUgraphExec, exec);
        const void *a[] = {&exec};
        CUresult r = gcall(g, k, SHIM_ID_cuGraphExecDestroy, a, 1);
        if (r == CUDA_SUCCESS && theirs) isolation(g, "cuGraphExecDestroy", exec);
        if (r == CUDA_SUCCESS && x) x->live = 0;
        break;
    }
    }
}

/* Stream capture: begin, capture a host function (as a host node), end into a graph. */
static void op_capture(struct gen *g, struct cl *k)
{
    uint64_t st = stream(g, k);
    switch (pick(&g->s, 4)) {
    case 0: {
        uint64_t mode = pick(&g->s, 3);
        const void *a[] = {&st, &mode};
        gcall(g, k, SHIM_ID_cuStreamBeginCapture_v2, a, 2);
        break;
    }
    case 1: {
        uint64_t gr = 0;
        void *pg = &gr;
        const void *a[] = {&st, &pg};
        if (gcall(g, k, SHIM_ID_cuStreamEndCapture, a, 2) == CUDA_SUCCESS && gr)
            add(k, K_GRAPH, gr, 0, 0, 0);
        break;
    }
    case 2: {
        uint64_t status = 0;
        void *ps = &status;
        const void *a[] = {&st, &ps};
        gcall(g, k, SHIM_ID_cuStreamIsCapturing, a, 2);
        break;
    }
    default: {
        struct chan_host_node m = {
            .what = CHAN_HN_CAPTURE, .graph = st, .fn = take(&g->s, 8) | 1, .user = take(&g->s, 8)};
        send_rec(g, k, CHAN_OP_HOST_NODE, 1, (uint8_t *)&m, sizeof(m), sizeof(m), NULL, 0, NULL);
        break;
    }
    }
}

/* ---- the virtual memory calls */

static CUmemAllocationProp vmm_prop(struct gen *g)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = odd(g) ? 1 : 0;
    p.requestedHandleTypes =
        pick(&g->s, 2) ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    if (odd(g)) p.type = (CUmemAllocationType)take(&g->s, 1);
    return p;
}

static void op_vmm(struct gen *g, struct cl *k)
{
    const uint64_t gran = 2u << 20; /* the driver's granularity (asked below, too) */
    struct obj *x;
    switch (pick(&g->s, 10)) {
    case 0: {
        CUmemAllocationProp p = vmm_prop(g);
        uint64_t h = 0, size = num(g, gran * (1 + pick(&g->s, 2))), fl = 0;
        void *ph = &h;
        const CUmemAllocationProp *pp = &p;
        const void *a[] = {&ph, &size, &pp, &fl};
        if (gcall(g, k, SHIM_ID_cuMemCreate, a, 4) == CUDA_SUCCESS && h)
            add(k, K_VMM, h, size, 0, 0);
        break;
    }
    case 1: {
        uint64_t h = name(g, k, K_VMM, &x);
        int theirs = !x && h && fh_owns(other(g, k)->fh, SHIM_HT_CUmemGenericAllocationHandle, h) &&
                     !fh_owns(k->fh, SHIM_HT_CUmemGenericAllocationHandle, h);
        const void *a[] = {&h};
        CUresult r = gcall(g, k, SHIM_ID_cuMemRelease, a, 1);
        if (r == CUDA_SUCCESS && theirs) isolation(g, "cuMemRelease", h);
        if (r == CUDA_SUCCESS && x) x->live = 0;
        break;
    }
    case 2: {
        uint64_t p = 0, size = num(g, gran * (1 + pick(&g->s, 4))), align = 0, addr = 0, fl = 0;
        if (odd(g)) align = num(g, gran);
        if (odd(g)) addr = take(&g->s, 8);
        void *pp = &p;
        const void *a[] = {&pp, &size, &align, &addr, &fl};
        if (gcall(g, k, SHIM_ID_cuMemAddressReserve, a, 5) == CUDA_SUCCESS && p)
            add(k, K_RESV, p, size, 0, 0);
        break;
    }
    case 3: {
        uint64_t p = name(g, k, K_RESV, &x), size = x ? x->size : gran;
        size = num(g, size);
        const void *a[] = {&p, &size};
        if (gcall(g, k, SHIM_ID_cuMemAddressFree, a, 2) == CUDA_SUCCESS && x) x->live = 0;
        break;
    }
    case 4:
    case 5: {
        /* Maps a handle into a reservation, and sets its access. */
        struct obj *r, *h;
        need(g, k, K_RESV);
        need(g, k, K_VMM);
        uint64_t p = name(g, k, K_RESV, &r), hv = name(g, k, K_VMM, &h);
        uint64_t size = h ? h->size : gran, off = 0, fl = 0;
        if (r && one_in(&g->s, 4) && r->size > size)
            p += gran * pick(&g->s, (uint32_t)((r->size - size) / gran + 1));
        if (odd(g)) size = num(g, size);
        if (odd(g)) off = num(g, 0);
        const void *a[] = {&p, &size, &off, &hv, &fl};
        if (gcall(g, k, SHIM_ID_cuMemMap, a, 5) == CUDA_SUCCESS) {
            add(k, K_MAP, p, size, 0, 0);
            CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                 .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            if (odd(g)) d.location.id = 1;
            const void *pd = &d;
            uint64_t cnt = 1;
            const void *b[] = {&p, &size, &pd, &cnt};
            gcall(g, k, SHIM_ID_cuMemSetAccess, b, 4);
        }
        break;
    }
    case 6: {
        uint64_t p = name(g, k, K_MAP, &x), size = x ? x->size : gran;
        if (odd(g)) size = num(g, size);
        const void *a[] = {&p, &size};
        if (gcall(g, k, SHIM_ID_cuMemUnmap, a, 2) == CUDA_SUCCESS && x) x->live = 0;
        break;
    }
    case 7: {
        uint64_t h = 0, room;
        uint64_t addr = pick(&g->s, 2) ? name(g, k, K_MAP, NULL) : devptr(g, k, &room);
        void *ph = &h;
        void *pa = (void *)(uintptr_t)addr;
        const void *a[] = {&ph, &pa};
        if (gcall(g, k, SHIM_ID_cuMemRetainAllocationHandle, a, 2) == CUDA_SUCCESS && h)
            add(k, K_VMM, h, gran, 0, 0);
        break;
    }
    case 8: {
        CUmemAllocationProp p;
        uint64_t h = name(g, k, K_VMM, NULL);
        void *pp = &p;
        const void *a[] = {&pp, &h};
        gcall(g, k, SHIM_ID_cuMemGetAllocationPropertiesFromHandle, a, 2);
        break;
    }
    default: {
        CUmemAllocationProp p = vmm_prop(g);
        uint64_t gr = 0, opt = pick(&g->s, 3);
        void *pg = &gr;
        const CUmemAllocationProp *pp = &p;
        const void *a[] = {&pg, &pp, &opt};
        gcall(g, k, SHIM_ID_cuMemGetAllocationGranularity, a, 3);
        break;
    }
    }
}

/* ---- IPC between the two clients (or a client and itself) */

static void op_ipc(struct gen *g, struct cl *k)
{
    struct chan_ipc m;
    struct chan_ipc_reply out;
    memset(&m, 0, sizeof(m));
    memset(&out, 0, sizeof(out));
    uint32_t what = 1 + pick(&g->s, 7);
    m.what = what;
    struct obj *x = NULL;
    switch (what) {
    case CHAN_IPC_GET_MEM: {
        uint64_t room;
        need(g, k, K_DEV);
        m.value = pick(&g->s, 4) ? name(g, k, K_DEV, NULL) : devptr(g, k, &room);
        break;
    }
    case CHAN_IPC_GET_EVENT:
        m.value = name(g, k, K_EVENT, NULL);
        break;
    case CHAN_IPC_GET_VMM:
        m.value = name(g, k, K_VMM, NULL);
        m.flags = odd(g) ? (uint32_t)take(&g->s, 4) : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        break;
    case CHAN_IPC_CLOSE_MEM:
        m.value = name(g, k, K_OPENED, &x);
        break;
    default: {
        /* Opening: a handle one of the clients exported, mostly of the kind asked for. */
        int want = what == CHAN_IPC_OPEN_MEM     ? CHAN_IPC_GET_MEM
                   : what == CHAN_IPC_OPEN_EVENT ? CHAN_IPC_GET_EVENT
                                                 : CHAN_IPC_GET_VMM;
        int have = -1;
        for (int i = 0, start = (int)pick(&g->s, 16); i < g->nsh; i++) {
            int j = (start + i) % g->nsh;
            if (g->sh[j].what == want || odd(g)) {
                have = j;
                break;
            }
        }
        if (have >= 0) memcpy(m.handle, g->sh[have].h, sizeof(m.handle));
        if (have < 0 || odd(g))
            for (int i = 0, n = 1 + (int)pick(&g->s, 4); i < n; i++)
                m.handle[pick(&g->s, sizeof(m.handle))] ^= (uint8_t)take(&g->s, 1);
        if (what == CHAN_IPC_OPEN_MEM && odd(g)) m.flags = (uint32_t)take(&g->s, 4);
        break;
    }
    }
    CUresult r = send_rec(g, k, CHAN_OP_IPC, 1, (uint8_t *)&m, sizeof(m), sizeof(m), &out,
                          sizeof(out), NULL);
    if (r != CUDA_SUCCESS) return;
    switch (what) {
    case CHAN_IPC_GET_MEM:
    case CHAN_IPC_GET_EVENT:
    case CHAN_IPC_GET_VMM: {
        int at = g->nsh < 16 ? g->nsh++ : (int)pick(&g->s, 16);
        memcpy(g->sh[at].h, out.handle, sizeof(out.handle));
        g->sh[at].what = (int)what;
        break;
    }
    case CHAN_IPC_OPEN_MEM:
        add(k, K_OPENED, out.value, out.size, 0, 0);
        break;
    case CHAN_IPC_OPEN_EVENT:
        add(k, K_EVENT, out.value, 0, 0, 0);
        break;
    case CHAN_IPC_OPEN_VMM:
        add(k, K_VMM, out.value, 2u << 20, 0, 0);
        break;
    case CHAN_IPC_CLOSE_MEM:
        if (x && !out.opens) x->live = 0;
        break;
    }
}

/* ---- memory pools, launch attributes, textures, __managed__ variables */

static void op_pool(struct gen *g, struct cl *k)
{
    struct obj *x;
    switch (pick(&g->s, 8)) {
    case 0: {
        CUmemPoolProps p;
        memset(&p, 0, sizeof(p));
        p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = odd(g) ? (int)take(&g->s, 1) : 0;
        if (odd(g)) p.handleTypes = (CUmemAllocationHandleType)take(&g->s, 1);
        p.maxSize = odd(g) ? num(g, 1u << 20) : 0;
        uint64_t pool = 0;
        void *pp = &pool;
        const CUmemPoolProps *pr = &p;
        const void *a[] = {&pp, &pr};
        if (gcall(g, k, SHIM_ID_cuMemPoolCreate, a, 2) == CUDA_SUCCESS && pool)
            add(k, K_POOL, pool, 0, 1, 0);
        break;
    }
    case 1: {
        uint64_t pool = name(g, k, K_POOL, &x);
        int theirs = !x && pool && fh_owns(other(g, k)->fh, SHIM_HT_CUmemoryPool, pool) &&
                     !fh_owns(k->fh, SHIM_HT_CUmemoryPool, pool);
        const void *a[] = {&pool};
        CUresult r = gcall(g, k, SHIM_ID_cuMemPoolDestroy, a, 1);
        if (r == CUDA_SUCCESS && theirs) isolation(g, "cuMemPoolDestroy", pool);
        if (r == CUDA_SUCCESS && x) x->live = 0;
        break;
    }
    case 2:
    case 3: {
        uint64_t d = 0, bytes = num(g, 256u << pick(&g->s, 12)), pool = name(g, k, K_POOL, NULL),
                 st = stream(g, k);
        void *pd = &d;
        const void *a[] = {&pd, &bytes, &pool, &st};
        if (gcall(g, k, SHIM_ID_cuMemAllocFromPoolAsync, a, 4) == CUDA_SUCCESS && d)
            add(k, K_DEV, d, bytes, 1, 0);
        break;
    }
    case 4: {
        uint64_t pool = name(g, k, K_POOL, NULL), attr = 1 + pick(&g->s, 8), v = num(g, 0);
        void *pv = &v;
        const void *a[] = {&pool, &attr, &pv};
        gcall(g, k, pick(&g->s, 2) ? SHIM_ID_cuMemPoolSetAttribute : SHIM_ID_cuMemPoolGetAttribute,
              a, 3);
        break;
    }
    case 5: {
        uint64_t pool = name(g, k, K_POOL, NULL), keep = num(g, 0);
        const void *a[] = {&pool, &keep};
        gcall(g, k, SHIM_ID_cuMemPoolTrimTo, a, 2);
        break;
    }
    case 6: {
        uint64_t pool = 0, dev = odd(g) ? take(&g->s, 1) : 0;
        void *pp = &pool;
        const void *a[] = {&pp, &dev};
        if (gcall(g, k,
                  pick(&g->s, 2) ? SHIM_ID_cuDeviceGetDefaultMemPool : SHIM_ID_cuDeviceGetMemPool,
                  a, 2) == CUDA_SUCCESS &&
            pool)
            add(k, K_POOL, pool, 0, 0, 0); /* the device's: not the client's to destroy */
        break;
    }
    default: {
        uint64_t dev = odd(g) ? take(&g->s, 1) : 0, pool = name(g, k, K_POOL, NULL);
        const void *a[] = {&dev, &pool};
        gcall(g, k, SHIM_ID_cuDeviceSetMemPool, a, 2);
        break;
    }
    }
}

/* Launch attributes of streams and kernel nodes: plain values, and the ones whose union
 * member is an event (the server checks it is the caller's own). */
static void op_attr(struct gen *g, struct cl *k)
{
    static const CUlaunchAttributeID ids[] = {CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                                              CU_LAUNCH_ATTRIBUTE_PRIORITY,
                                              CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
                                              CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
                                              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT,
                                              CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
                                              CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
                                              CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                                              CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    uint64_t id = ids[pick(&g->s, sizeof(ids) / sizeof(ids[0]))];
    if (odd(g)) id = take(&g->s, 1);
    CUlaunchAttributeValue v;
    memset(&v, 0, sizeof(v));
    struct obj *ev = NULL;
    uint64_t evv = 0;
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
        uint64_t room;
        v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)devptr(g, k, &room);
        v.accessPolicyWindow.num_bytes = num(g, room);
        v.accessPolicyWindow.hitRatio = 0.5f;
        v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
        v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
        break;
    }
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
    case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        need(g, k, K_EVENT);
        evv = name(g, k, K_EVENT, &ev);
        v.programmaticEvent.event = (CUevent)(uintptr_t)evv;
        v.programmaticEvent.flags = pick(&g->s, 2);
        break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        v.clusterDim.x = v.clusterDim.y = v.clusterDim.z = 1;
        break;
    default:
        v.priority = (int)pick(&g->s, 4);
        break;
    }
    int theirs = !ev && evv && fh_owns(other(g, k)->fh, SHIM_HT_CUevent, evv) &&
                 !fh_owns(k->fh, SHIM_HT_CUevent, evv);
    CUresult r;
    void *pv = &v;
    if (pick(&g->s, 2)) {
        uint64_t st = stream(g, k);
        const void *a[] = {&st, &id, &pv};
        r = gcall(g, k,
                  pick(&g->s, 3) ? SHIM_ID_cuStreamSetAttribute : SHIM_ID_cuStreamGetAttribute, a,
                  3);
    } else {
        uint64_t node = name(g, k, K_NODE, NULL), node2 = name(g, k, K_NODE, NULL);
        const void *a[] = {&node, &id, &pv};
        const void *b[] = {&node2, &node};
        switch (pick(&g->s, 3)) {
        case 0:
            r = gcall(g, k, SHIM_ID_cuGraphKernelNodeSetAttribute, a, 3);
            break;
        case 1:
            r = gcall(g, k, SHIM_ID_cuGraphKernelNodeGetAttribute, a, 3);
            theirs = 0;
            break;
        default:
            r = gcall(g, k, SHIM_ID_cuGraphKernelNodeCopyAttributes, b, 2);
            theirs = 0;
        }
    }
    if (r == CUDA_SUCCESS && theirs) isolation(g, "a launch attribute naming an event", evv);
}

static void op_texture(struct gen *g, struct cl *k)
{
    struct obj *x;
    if (one_in(&g->s, 3)) {
        int surf = pick(&g->s, 2);
        uint64_t t = name(g, k, surf ? K_SURF : K_TEX, &x);
        const void *a[] = {&t};
        if (gcall(g, k, surf ? SHIM_ID_cuSurfObjectDestroy : SHIM_ID_cuTexObjectDestroy, a, 1) ==
                CUDA_SUCCESS &&
            x)
            x->live = 0;
        return;
    }
    CUDA_RESOURCE_DESC rd;
    memset(&rd, 0, sizeof(rd));
    uint64_t room;
    switch (pick(&g->s, 3)) {
    case 0:
        rd.resType = CU_RESOURCE_TYPE_ARRAY;
        rd.res.array.hArray = (CUarray)(uintptr_t)name(g, k, K_ARRAY, NULL);
        break;
    case 1:
        rd.resType = CU_RESOURCE_TYPE_LINEAR;
        rd.res.linear.devPtr = devptr(g, k, &room);
        rd.res.linear.format = CU_AD_FORMAT_FLOAT;
        rd.res.linear.numChannels = 1;
        rd.res.linear.sizeInBytes = num(g, room & ~(uint64_t)3);
        break;
    default:
        rd.resType = CU_RESOURCE_TYPE_PITCH2D;
        rd.res.pitch2D.devPtr = devptr(g, k, &room);
        rd.res.pitch2D.format = CU_AD_FORMAT_UNSIGNED_INT8;
        rd.res.pitch2D.numChannels = 1;
        rd.res.pitch2D.width = num(g, 32);
        rd.res.pitch2D.height = num(g, room / 256 ? room / 256 : 1);
        rd.res.pitch2D.pitchInBytes = num(g, 256);
        break;
    }
    if (odd(g)) rd.resType = (CUresourcetype)take(&g->s, 1);
    uint64_t t = 0;
    void *pt = &t;
    const CUDA_RESOURCE_DESC *prd = &rd;
    if (pick(&g->s, 3) == 0) {
        const void *a[] = {&pt, &prd};
        if (gcall(g, k, SHIM_ID_cuSurfObjectCreate, a, 2) == CUDA_SUCCESS && t)
            add(k, K_SURF, t, 0, 0, 0);
        return;
    }
    CUDA_TEXTURE_DESC td;
    memset(&td, 0, sizeof(td));
    td.filterMode = pick(&g->s, 2);
    td.flags = pick(&g->s, 4);
    const CUDA_TEXTURE_DESC *ptd = &td;
    const void *pview = NULL;
    const void *a[] = {&pt, &prd, &ptd, &pview};
    if (gcall(g, k, SHIM_ID_cuTexObjectCreate, a, 4) == CUDA_SUCCESS && t)
        add(k, K_TEX, t, 0, 0, 0);
}

/* __managed__ variables (CHAN_OP_MVAR): a module of managed.fatbin's, its mv_arr looked up,
 * then transfers naming it (or, odd, other memory, past its end, more bytes than sent); the
 * migrating transfers (MPUSH, MPULL) name managed memory of its own where it has some. */
static void op_mvar(struct gen *g, struct cl *k)
{
    struct obj *v = own(&g->s, k, K_MVAR);
    if (!v) {
        struct obj *m = NULL;
        for (int i = 0; i < k->n && !m; i++)
            if (k->o[i].live && k->o[i].kind == K_MODULE && k->o[i].a == IMG_MANAGED) m = &k->o[i];
        if (!m) {
            load_image(g, k, IMG_MANAGED, CHAN_IMAGE_MODULE);
            return;
        }
        static const char *const vars[] = {"mv_arr", "mv_count", "g_plain"};
        uint64_t d = 0, bytes = 0, mod = m->v;
        void *pd = &d, *pb = &bytes;
        const char *nm = vars[pick(&g->s, 3)];
        const void *a[] = {&pd, &pb, &mod, &nm};
        if (gcall(g, k, SHIM_ID_cuModuleGetGlobal_v2, a, 4) == CUDA_SUCCESS && d && bytes)
            add(k, K_MVAR, d, bytes, 0, 0);
        return;
    }
    static uint8_t buf[CHAN_REC_MAX];
    struct chan_mvar h = {.what = CHAN_MVAR_INFO + pick(&g->s, 6), .n = 1 + pick(&g->s, 3)};
    if (odd(g)) h.what = (uint32_t)take(&g->s, 1);
    int migrating = h.what == CHAN_MVAR_MPUSH || h.what == CHAN_MVAR_MPULL;
    struct obj *own_managed = migrating ? own(&g->s, k, K_PINNED) : NULL;
    if (h.what == CHAN_MVAR_MPULL) h.buf = pick(&g->s, 2) ? CHAN_MPULL_AFTER_WORK : 0;
    struct chan_mvar_ent e[4];
    uint64_t data = 0;
    struct obj *pin = NULL;
    if (h.what == CHAN_MVAR_PULL) {
        pin = own(&g->s, k, K_PINNED);
        h.buf = pin ? pin->v : name(g, k, K_DEV, NULL);
    }
    if (h.what == CHAN_MVAR_INFO) h.n = 1;
    for (uint32_t i = 0; i < h.n; i++) {
        struct obj *x = own_managed ? own_managed : pick(&g->s, 4) ? v : own(&g->s, k, K_MVAR);
        if (!x) x = v;
        e[i].dptr = x->v + (x->size > 4 ? 4 * pick(&g->s, (uint32_t)(x->size / 4)) : 0);
        e[i].len = 1 + pick(&g->s, (uint32_t)(x->v + x->size - e[i].dptr));
        e[i].off = pin && pin->size > e[i].len ? pick(&g->s, (uint32_t)(pin->size - e[i].len)) : 0;
        if (odd(g)) {
            e[i].dptr = pick(&g->s, 2) ? name(g, k, K_DEV, NULL) : num(g, e[i].dptr);
            e[i].len = num(g, e[i].len);
            e[i].off = num(g, e[i].off);
        }
        data += e[i].len;
    }
    if (odd(g)) h.n = (uint32_t)num(g, h.n);
    uint32_t len = sizeof(h) + (uint32_t)(h.n < 4 ? h.n : 4) * sizeof(e[0]);
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), e, len - sizeof(h));
    if (h.what == CHAN_MVAR_PUSH && data <= sizeof(buf) - len - 64) {
        memset(buf + len, (int)take(&g->s, 1), data);
        len += (uint32_t)data;
    }
    static uint8_t out[CHAN_LANE_DATA];
    int async = h.what == CHAN_MVAR_PUSH || (h.what == CHAN_MVAR_MPUSH && pick(&g->s, 2));
    send_rec(g, k, CHAN_OP_MVAR, async ? 0 : 1, buf, len, sizeof(buf) - 16, out, sizeof(out), NULL);
}

/* ---- the rest: small operations, described calls with anything in them, broken framing */

static void op_misc(struct gen *g, struct cl *k)
{
    switch (pick(&g->s, 5)) {
    case 0: {
        int32_t code = (int32_t)num(g, pick(&g->s, 1000));
        char s[256];
        send_rec(g, k, CHAN_OP_ERROR_STRING, 1, (uint8_t *)&code, sizeof(code), sizeof(code), s,
                 sizeof(s), NULL);
        break;
    }
    case 1: {
        uint32_t off = (uint32_t)num(g, 0);
        static uint8_t out[CHAN_LANE_DATA];
        send_rec(g, k, CHAN_OP_PROCADDR, 1, (uint8_t *)&off, sizeof(off), sizeof(off), out,
                 sizeof(out), NULL);
        break;
    }
    case 2: {
        uint64_t fr = 0, tot = 0;
        void *pf = &fr, *pt = &tot;
        const void *a[] = {&pf, &pt};
        gcall(g, k, SHIM_ID_cuMemGetInfo_v2, a, 2);
        break;
    }
    default: {
        /* Any described call, its payload from the input: past the decoder only when its
         * counts agree, then checked by the server like any other. */
        static uint8_t buf[1024];
        unsigned id = pick(&g->s, SHIM_NCALLS);
        if (shim_calls[id].cls != SHIM_SYNC && shim_calls[id].cls != SHIM_ASYNC) return;
        uint32_t len = pick(&g->s, 8) * 8 + (one_in(&g->s, 4) ? pick(&g->s, 200) : 0);
        for (uint32_t i = 0; i < len; i++)
            buf[i] = (uint8_t)(pick(&g->s, 2) ? take(&g->s, 1) : 0);
        send_rec(g, k, id, shim_calls[id].cls == SHIM_SYNC, buf, len, sizeof(buf), NULL, 0, NULL);
        break;
    }
    }
}

/* A record whose framing is broken (a size past the ring, an unknown operation, a tail
 * that jumps): the server must drop this client and serve the other. */
static void op_broken(struct gen *g, struct cl *k)
{
    struct chan_rec r = {.size = (uint32_t)num(g, 16), .op = (uint16_t)take(&g->s, 2)};
    if (pick(&g->s, 2)) r.op = (uint16_t)(CHAN_OP_END + pick(&g->s, 8));
    uint64_t adv = pick(&g->s, 2) ? CHAN_REC_SPAN(r.size) : take(&g->s, 4);
    if (g->trace)
        fprintf(stderr, "  #%d c%d broken framing (size %u, op %#x, tail +%llu)\n", g->step,
                (int)(k - g->cl), r.size, r.op, (unsigned long long)adv);
    fh_raw(k->fh, &r, sizeof(r), adv);
}

/* The client goes (terminated, now and then) in the middle of the input. */
static void op_leave(struct gen *g, struct cl *k)
{
    if (g->trace) fprintf(stderr, "  #%d c%d leaves\n", g->step, (int)(k - g->cl));
    fh_leave(k->fh, one_in(&g->s, 4));
    k->on = 0;
    k->left = 1;
    k->fh = NULL;
}

/* One of the client's live objects of `kind`, made first when it has none, as a program
 * makes what it uses before using it (so that an operation gets past its first check);
 * NULL when that failed. */
static struct obj *need(struct gen *g, struct cl *k, int kind)
{
    struct obj *x = own(&g->s, k, kind);
    if (x || !k->ctx) return x;
    switch (kind) {
    case K_GRAPH:
        op_graph_create(g, k);
        break;
    case K_EVENT:
        op_event_create(g, k);
        break;
    case K_STREAM:
        op_stream_create(g, k);
        break;
    case K_DEV: {
        uint64_t d = 0, bytes = 4096u << pick(&g->s, 6);
        void *pd = &d;
        const void *a[] = {&pd, &bytes};
        if (gcall(g, k, SHIM_ID_cuMemAlloc_v2, a, 2) == CUDA_SUCCESS && d)
            add(k, K_DEV, d, bytes, 0, 0);
        break;
    }
    case K_FUNC:
        if (!own(&g->s, k, K_MODULE)) op_module_load(g, k);
        op_get_function(g, k);
        break;
    case K_NODE: {
        struct obj *gr = need(g, k, K_GRAPH);
        uint64_t graph = gr ? gr->v : 0, node = 0, nd = 0;
        void *pn = &node;
        const void *pdep = NULL;
        const void *a[] = {&pn, &graph, &pdep, &nd};
        if (gr && gcall(g, k, SHIM_ID_cuGraphAddEmptyNode, a, 4) == CUDA_SUCCESS && node)
            add(k, K_NODE, node, 0, CU_GRAPH_NODE_TYPE_EMPTY, (int32_t)(gr - k->o));
        break;
    }
    case K_EXEC: {
        struct obj *gr = need(g, k, K_GRAPH);
        uint64_t exec = 0, graph = gr ? gr->v : 0, fl = 0;
        void *pe = &exec;
        const void *a[] = {&pe, &graph, &fl};
        if (gr && gcall(g, k, SHIM_ID_cuGraphInstantiateWithFlags, a, 3) == CUDA_SUCCESS && exec)
            add(k, K_EXEC, exec, 0, 0, (int32_t)(gr - k->o));
        break;
    }
    case K_VMM:
    case K_RESV: {
        const uint64_t gran = 2u << 20;
        uint64_t h = 0, size = gran, zero = 0;
        CUmemAllocationProp p;
        memset(&p, 0, sizeof(p));
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        void *ph = &h;
        const CUmemAllocationProp *pp = &p;
        const void *a[] = {&ph, &size, &pp, &zero};
        const void *b[] = {&ph, &size, &zero, &zero, &zero};
        if (gcall(g, k, kind == K_VMM ? SHIM_ID_cuMemCreate : SHIM_ID_cuMemAddressReserve,
                  kind == K_VMM ? a : b, kind == K_VMM ? 4 : 5) == CUDA_SUCCESS &&
            h)
            add(k, kind, h, size, 0, 0);
        break;
    }
    default:
        break;
    }
    return own(&g->s, k, kind);
}

static const struct {
    op_fn *fn;
    int weight;
} ops[] = {
    {op_ctx_create, 3},    {op_ctx_destroy, 1},   {op_ctx_sync, 2},
    {op_limit, 3},         {op_stream_create, 4}, {op_stream_destroy, 2},
    {op_stream_sync, 3},   {op_event_create, 4},  {op_event_record, 3},
    {op_event_misc, 3},    {op_event_destroy, 2}, {op_mem_alloc, 8},
    {op_mem_free, 3},      {op_memset, 4},        {op_stream_value, 2},
    {op_host_func, 3},     {op_host_alloc, 3},    {op_host_free, 1},
    {op_host_register, 2}, {op_array, 3},         {op_copy, 10},
    {op_module_load, 3},   {op_get_function, 5},  {op_module_misc, 2},
    {op_launch, 6},        {op_occupancy, 1},     {op_graph_create, 6},
    {op_graph_destroy, 2}, {op_graph_add, 18},    {op_graph_node, 8},
    {op_exec, 10},         {op_capture, 5},       {op_vmm, 8},
    {op_ipc, 8},           {op_misc, 3},          {op_broken, 1},
    {op_leave, 1},         {op_pool, 4},          {op_attr, 3},
    {op_texture, 2},       {op_mvar, 4},
};
#define NOPS ((int)(sizeof(ops) / sizeof(ops[0])))

static int total_weight;

/* ---------------------------------------------------------------- the input */

/* Records of one input at most: what an operation needs is made on the way (need), so deep
 * states come within a few dozen steps, and shorter inputs keep 10^6 runs within the hour. */
#ifndef MAX_STEPS
#define MAX_STEPS 48
#endif

static void connect_client(struct gen *g, struct cl *k)
{
    memset(k, 0, sizeof(*k));
    k->fh = fh_connect();
    k->on = 1;
    k->next_ctx = 1;
    /* Its first call makes a context, as the shim's does (not always: calls without one). */
    if (!one_in(&g->s, 16)) {
        struct chan_ctx m = {.id = 1, .device = 0, .primary = 1};
        g->plain = 1;
        if (send_rec(g, k, CHAN_OP_CTX_CREATE, 1, (uint8_t *)&m, sizeof(m), sizeof(m), NULL, 0,
                     NULL) == CUDA_SUCCESS) {
            add(k, K_CTX, 1, 0, 0, 0);
            k->ctx = 1;
            k->next_ctx = 2;
        }
        g->plain = 0;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (fh_init() != 0 || load_images() != 0) exit(1);
    for (int i = 0; i < NOPS; i++)
        total_weight += ops[i].weight;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gen g;
    memset(&g, 0, sizeof(g));
    g.s = (struct src){.p = data, .n = size};
    /* The first byte: how odd the fields are, and whether a second client takes part (IPC,
     * isolation: half the inputs; the others spend no time on its connection and release). */
    uint32_t lead = (uint32_t)take(&g.s, 1);
    g.chaos = (int)(lead & 3);
    int two = (lead >> 2) & 1;
    fh_begin();
    const char *t = getenv("FUZZ_SERVER_TRACE");
    g.trace = t && *t == '1';
    if (g.trace) fprintf(stderr, "input of %zu bytes\n", size);
    connect_client(&g, &g.cl[0]);
    for (g.step = 0; g.step < MAX_STEPS && g.s.i < g.s.n; g.step++) {
        struct cl *k = &g.cl[two && one_in(&g.s, 4)];
        if (!k->on) {
            if (!k->left) /* one that left stays gone */
                connect_client(&g, k);
            continue;
        }
        int w = (int)pick(&g.s, (uint32_t)total_weight), i = 0;
        while (w >= ops[i].weight)
            w -= ops[i++].weight;
        ops[i].fn(&g, k);
        if (k->on && fh_gone(k->fh)) {
            if (g.trace) fprintf(stderr, "  c%d was dropped\n", (int)(k - g.cl));
            fh_leave(k->fh, 0);
            k->on = 0;
            k->left = 1;
            k->fh = NULL;
        }
    }
    /* Everyone leaves, in an order the input picks. */
    int first = (int)pick(&g.s, 2);
    for (int j = 0; j < 2; j++) {
        struct cl *k = &g.cl[(first + j) % 2];
        if (k->on) fh_leave(k->fh, one_in(&g.s, 8));
        k->on = 0;
    }
    char why[256];
    if (fh_check_idle(why, sizeof(why)) != 0) {
        fprintf(stderr, "fuzz_server: after the input's %d records: %s\n", g.step, why);
        fh_show_log();
        abort();
    }
    return 0;
}
