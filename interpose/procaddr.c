/* cuGetProcAddress: the shim answers exactly as the driver behind the server does, and
 * always hands out the shim's own entry points.
 *
 * Where the answers come from is decided once, before the first answer: cuGetProcAddress
 * is an entry point like the others, so the process first connects (or falls back to the
 * real driver, which then answers itself: stubs.h). Connected to a server of protocol 4.3
 * or later, the process reads the table of that server's driver's answers right after the
 * handshake (shim_procaddr_fetch) and answers from it for the rest of its life; without
 * one (no server and no driver, an older server, a table that fails the checks below) it
 * answers from the 580 driver's table compiled in (gen/data/procaddress-*.tsv). So one
 * request never gets two different entry points. */
#define _GNU_SOURCE
#include "channel/procaddr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "interpose/shim.h"
#include "interpose/symtab.h"

/* The rows answers come from: the compiled-in ones until a server's replace them, before
 * the process's first answer (under the connection lock); never changed afterwards. */
struct table {
    const struct shim_procaddr_row *rows;
    size_t n;
};
static struct table compiled;
static _Atomic(const struct table *) active;

static const struct table *current(void)
{
    const struct table *t = atomic_load_explicit(&active, memory_order_acquire);
    if (t) return t;
    compiled.rows = shim_procaddr_rows;
    compiled.n = shim_nprocaddr_rows;
    return &compiled;
}

void *shim_symtab_find(const char *name)
{
    size_t lo = 0, hi = shim_nsymtab;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(shim_symtab[mid].name, name);
        if (c == 0) return shim_symtab[mid].fn;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The row that answers (name, flags, version): the last one with row.version <= version. */
static const struct shim_procaddr_row *lookup(const struct table *t, const char *name, int flags,
                                              int version)
{
    size_t lo = 0, hi = t->n;
    /* First row >= (name, flags). */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct shim_procaddr_row *r = &t->rows[mid];
        int c = strcmp(r->name, name);
        if (c < 0 || (c == 0 && r->flags < flags))
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct shim_procaddr_row *best = NULL;
    for (size_t i = lo; i < t->n; i++) {
        const struct shim_procaddr_row *r = &t->rows[i];
        if (strcmp(r->name, name) != 0 || r->flags != flags || r->version > version) break;
        best = r;
    }
    return best;
}

/* Flags value the table is keyed by: the stream-semantics bits only. */
static int flag_key(cuuint64_t flags)
{
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) return 2;
    if (flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM) return 1;
    return 0;
}

CUresult SHIM_IMPL(cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct shim_procaddr_row *r = lookup(current(), symbol, flag_key(flags), cudaVersion);
    if (!r || !r->symbol) {
        CUresult res = r ? (CUresult)r->result : CUDA_ERROR_NOT_FOUND;
        int st = r ? r->status : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (status && st >= 0) *status = (CUdriverProcAddressQueryResult)st;
        return res;
    }
    void *fn = shim_symtab_find(r->symbol);
    if (!fn) {
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuGetProcAddress)(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---------------------------------------------------------------- the server's table */

/* The server is still there (the connection is not marked up yet, so shim_server_alive
 * would say no): it never sends unprompted data, so readable means hung up. */
static int fetch_alive(void *unused)
{
    (void)unused;
    char b;
    if (atomic_load(&shim_conn.ch.shm->dead)) return 0;
    ssize_t n = recv(shim_conn.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR));
}

/* Reads the whole table into a buffer of its own; NULL with *why on failure. */
static uint8_t *fetch_all(uint32_t *total, const char **why)
{
    const struct chan_wait w = {.spin_ns = 200 * 1000, .alive = fetch_alive};
    uint8_t *buf = NULL;
    uint32_t off = 0;
    *total = 0;
    do {
        struct shim_req q;
        if (shim_req_begin(&q, CHAN_OP_PROCADDR, sizeof(off), 1, SHIM_RQ_QUIET) != CUDA_SUCCESS) {
            *why = "the server went away";
            goto fail;
        }
        memcpy(q.payload, &off, sizeof(off));
        shim_req_send(&q);
        int gone = chan_lane_wait(&shim_conn.ch, (uint32_t)q.lane, q.seq0, &w) != 0;
        shim_req_done(&q);
        if (gone) {
            *why = "the server went away";
            goto fail;
        }
        /* The lane is shared memory: its length is read once and bounded, its bytes
         * copied out before they are looked at. */
        struct chan_lane *l = &shim_conn.ch.lanes[q.lane];
        CUresult res = (CUresult)l->result;
        uint32_t len = l->len;
        struct chan_procaddr_page pg;
        if (res != CUDA_SUCCESS) {
            /* CUDA_ERROR_NOT_FOUND: it has none (its log says why): nothing to say here. */
            *why = res == CUDA_ERROR_NOT_FOUND ? NULL : "the server refused to send it";
            goto fail;
        }
        if (len < sizeof(pg) || len > CHAN_LANE_DATA) {
            *why = "a page of a bad size";
            goto fail;
        }
        memcpy(&pg, l->data, sizeof(pg));
        uint32_t n = len - (uint32_t)sizeof(pg);
        if (!buf) {
            if (pg.total < sizeof(struct chan_procaddr_head) || pg.total > CHAN_PROCADDR_MAX) {
                *why = "its size is out of bounds";
                goto fail;
            }
            *total = pg.total;
            if (!(buf = malloc(pg.total))) {
                *why = "out of memory";
                goto fail;
            }
        }
        if (pg.total != *total || n == 0 || n > *total - off) {
            *why = "its pages do not add up";
            goto fail;
        }
        memcpy(buf + off, l->data + sizeof(pg), n);
        off += n;
    } while (off < *total);
    return buf;
fail:
    free(buf);
    return NULL;
}

/* The string at offset off of the strings, if it is a C identifier of at most 127
 * characters; else NULL. */
static const char *ident_at(const char *strings, uint32_t size, uint32_t off)
{
    if (off >= size) return NULL;
    const char *s = strings + off;
    size_t n = strnlen(s, size - off);
    if (n == 0 || n > 127 || n == size - off) return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
              (i > 0 && ch >= '0' && ch <= '9')))
            return NULL;
    }
    return s;
}

/* Whether the shim knows a name cuGetProcAddress may be asked for: one it exports, or one
 * the compiled-in table answers for. */
static int known_name(const char *name)
{
    if (shim_symtab_find(name)) return 1;
    struct table t = {shim_procaddr_rows, shim_nprocaddr_rows};
    for (int f = 0; f <= 2; f++)
        if (lookup(&t, name, f, 1 << 30)) return 1;
    return 0;
}

static int cmp_row(const void *a, const void *b)
{
    const struct shim_procaddr_row *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->flags != y->flags) return x->flags < y->flags ? -1 : 1;
    return (x->version > y->version) - (x->version < y->version);
}

/* The rows of a table the server sent, checked; NULL with *why when it is malformed. Names
 * the shim does not know are left out, symbols it does not export answer "not found":
 * each counted in *unknown, the first named in *first. */
static struct table *parse(const uint8_t *buf, uint32_t total, const char **why, size_t *unknown,
                           const char **first)
{
    struct chan_procaddr_head h;
    memcpy(&h, buf, sizeof(h));
    uint64_t need = sizeof(h) + (uint64_t)h.nrows * sizeof(struct chan_procaddr_row) + h.strings;
    if (h.magic != CHAN_PROCADDR_MAGIC || need != total || h.strings == 0) {
        *why = "its header does not describe it";
        return NULL;
    }
    const char *strings = (const char *)buf + total - h.strings;
    struct table *t = malloc(sizeof(*t));
    struct shim_procaddr_row *rows = malloc(((size_t)h.nrows + 1) * sizeof(*rows));
    if (!t || !rows) {
        *why = "out of memory";
        goto bad;
    }
    size_t n = 0;
    /* The server sends the rows of one name together: each name is looked up once. */
    uint32_t last_name = CHAN_PROCADDR_NONE;
    int last_known = 0;
    for (uint32_t i = 0; i < h.nrows; i++) {
        struct chan_procaddr_row r;
        memcpy(&r, buf + sizeof(h) + (size_t)i * sizeof(r), sizeof(r));
        const char *name = ident_at(strings, h.strings, r.name);
        const char *sym =
            r.symbol == CHAN_PROCADDR_NONE ? NULL : ident_at(strings, h.strings, r.symbol);
        if (!name || (r.symbol != CHAN_PROCADDR_NONE && !sym)) {
            *why = "a name in it is out of its bounds or no C identifier";
            goto bad;
        }
        if (r.flags < 0 || r.flags > 2 || r.version <= 0 ||
            (!sym && (r.result < 0 || r.result > 999 || r.status < -1 || r.status > 2))) {
            *why = "a row is out of range";
            goto bad;
        }
        if (r.name != last_name) {
            last_name = r.name;
            last_known = known_name(name);
        }
        if (!last_known || (sym && !shim_symtab_find(sym))) {
            if (!(*unknown)++) *first = last_known ? sym : name;
            if (!last_known) continue;
            sym = NULL; /* an entry point the shim does not have: not found */
            r.result = CUDA_ERROR_NOT_FOUND;
            r.status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        }
        rows[n++] = (struct shim_procaddr_row){
            name, r.flags, r.version, sym, sym ? 0 : r.result, sym ? 0 : r.status};
    }
    /* In order as the server sends them; sorted here only when they are not. */
    size_t i = 1;
    while (i < n && cmp_row(&rows[i - 1], &rows[i]) < 0)
        i++;
    if (i < n) qsort(rows, n, sizeof(*rows), cmp_row);
    for (i = 1; i < n; i++)
        if (cmp_row(&rows[i - 1], &rows[i]) == 0) {
            *why = "it answers one request twice";
            goto bad;
        }
    t->rows = rows;
    t->n = n;
    return t;
bad:
    free(rows);
    free(t);
    return NULL;
}

void shim_procaddr_fetch(unsigned server_minor)
{
    if (server_minor < 1) return; /* the server predates CHAN_OP_PROCADDR (protocol 5.1) */
    const char *why = NULL, *first = NULL;
    size_t unknown = 0;
    uint32_t total;
    uint8_t *buf = fetch_all(&total, &why);
    struct table *t = buf ? parse(buf, total, &why, &unknown, &first) : NULL;
    if (!t) {
        free(buf);
        if (why)
            shim_log("the server's cuGetProcAddress table is not usable (%s): answering as the 580 "
                     "driver does",
                     why);
        return;
    }
    if (unknown)
        shim_log("the server's driver answers cuGetProcAddress with %zu name(s) this shim does "
                 "not have (first: %s): those answer not found",
                 unknown, first);
    /* buf holds the strings the rows point to: it lives as long as the process. */
    atomic_store_explicit(&active, t, memory_order_release);
}
