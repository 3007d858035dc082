/* cuGetProcAddress answers of the driver this server runs on, probed once at start and
 * handed to every client at connect (CHAN_OP_PROCADDR), so that a client's entry points are
 * the ones this driver would give, whatever driver that is.
 *
 * What is asked: every name the shim knows (cuda_symbols.txt's exported names and the names
 * of the compiled-in 580 table), at flags 0, 1 and 2, at every version where an answer may
 * change: each version the compiled-in table has a row at (every release where the 580
 * driver changed an answer), every CUDA release (x.y0) from the table's newest up to the
 * driver's own version, that version and the one after it (a driver refuses a newer
 * runtime). Answers are named by the exported symbol the pointer is, and kept as rows the
 * way gen/data/procaddress-*.tsv keeps them: a row only where the answer changes. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/reply.h"
#include "server/code/procaddr.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channel/procaddr.h" /* the compiled-in table (build/gen/shim_procaddr.c) */

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

/* The table clients read: built before the server accepts anyone, read-only afterwards. */
static uint8_t *table;
static uint32_t table_len;

/* An exported name by address, to name what the driver returned. */
struct addr_name {
    uintptr_t addr;
    const char *name;
};

/* One interned string of the table. */
struct str {
    const char *s;
    uint32_t off;
    UT_hash_handle hh;
};

struct builder {
    struct chan_procaddr_row *rows;
    size_t nrows, cap_rows;
    char *strings;
    size_t nstrings, cap_strings;
    struct str *interned;
    int failed;
};

static int cmp_addr(const void *a, const void *b)
{
    const struct addr_name *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Offset of s in the strings, adding it once. */
static uint32_t intern(struct builder *b, const char *s)
{
    struct str *e;
    HASH_FIND_STR(b->interned, s, e);
    if (e) return e->off;
    size_t n = strlen(s) + 1;
    if (b->nstrings + n > b->cap_strings) {
        size_t cap = b->cap_strings ? b->cap_strings * 2 : 16384;
        while (cap < b->nstrings + n)
            cap *= 2;
        char *ns = realloc(b->strings, cap);
        if (!ns) {
            b->failed = 1;
            return 0;
        }
        b->strings = ns;
        b->cap_strings = cap;
    }
    if (!(e = malloc(sizeof(*e)))) {
        b->failed = 1;
        return 0;
    }
    /* The key is a copy of its own: the strings buffer moves as it grows. */
    if (!(e->s = strdup(s))) {
        free(e);
        b->failed = 1;
        return 0;
    }
    memcpy(b->strings + b->nstrings, s, n);
    e->off = (uint32_t)b->nstrings;
    b->nstrings += n;
    HASH_ADD_KEYPTR(hh, b->interned, e->s, strlen(e->s), e);
    return e->off;
}

static void add_row(struct builder *b, const struct chan_procaddr_row *r)
{
    if (b->nrows == b->cap_rows) {
        size_t cap = b->cap_rows ? b->cap_rows * 2 : 4096;
        struct chan_procaddr_row *n = realloc(b->rows, cap * sizeof(*n));
        if (!n) {
            b->failed = 1;
            return;
        }
        b->rows = n;
        b->cap_rows = cap;
    }
    b->rows[b->nrows++] = *r;
}

/* Every name to ask for, sorted and unique; *n gets the count. NULL when out of memory. */
static const char **names_to_ask(size_t *n)
{
    const char **v = malloc((SHIM_NCALLS + shim_nprocaddr_rows) * sizeof(*v));
    size_t k = 0;
    if (!v) return NULL;
    for (int i = 0; i < SHIM_NCALLS; i++)
        if (shim_calls[i].cls != SHIM_ABSENT) v[k++] = shim_calls[i].name;
    for (size_t i = 0; i < shim_nprocaddr_rows; i++)
        if (i == 0 || strcmp(shim_procaddr_rows[i].name, shim_procaddr_rows[i - 1].name) != 0)
            v[k++] = shim_procaddr_rows[i].name;
    qsort(v, k, sizeof(*v), cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0) v[u++] = v[i];
    *n = u;
    return v;
}

/* The next CUDA release number after v (x.y0, y up to 9). */
static int next_release(int v)
{
    return (v % 1000) / 10 >= 9 ? (v / 1000 + 1) * 1000 : v - v % 10 + 10;
}

/* The versions to ask at, sorted and unique; *n gets the count. */
static int *versions_to_ask(int driver, size_t *n)
{
    size_t cap = shim_nprocaddr_rows + 256, k = 0;
    int *v = malloc(cap * sizeof(*v));
    if (!v) return NULL;
    int top = 0;
    for (size_t i = 0; i < shim_nprocaddr_rows; i++) {
        v[k++] = shim_procaddr_rows[i].version;
        if (shim_procaddr_rows[i].version > top) top = shim_procaddr_rows[i].version;
    }
    /* Releases the compiled-in table cannot know of, up to the driver's (bounded: 200 is
     * twenty major versions). */
    for (int r = next_release(top); driver > 0 && r <= driver && k < cap - 2; r = next_release(r))
        v[k++] = r;
    if (driver > 0) {
        v[k++] = driver;
        v[k++] = driver + 1;
    }
    qsort(v, k, sizeof(*v), cmp_int);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || v[u - 1] != v[i]) v[u++] = v[i];
    *n = u;
    return v;
}

/* The exported symbol at p: one of ours (by address; among aliases the one named like the
 * request, else the first by name), else whatever exported name the driver has there.
 * NULL when p is no exported symbol's address. */
static const char *name_of(const struct addr_name *known, size_t nknown, const char *asked, void *p,
                           int *aliased)
{
    size_t lo = 0, hi = nknown;
    uintptr_t a = (uintptr_t)p;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (known[mid].addr < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < nknown && known[lo].addr == a) {
        const char *best = known[lo].name;
        size_t alen = strlen(asked);
        if (lo + 1 < nknown && known[lo + 1].addr == a) *aliased = 1;
        for (size_t i = lo; i < nknown && known[i].addr == a; i++)
            if (strncmp(known[i].name, asked, alen) == 0 && strncmp(best, asked, alen) != 0)
                best = known[i].name;
        return best;
    }
    Dl_info di;
    if (dladdr(p, &di) && di.dli_sname && di.dli_saddr == p) return di.dli_sname;
    return NULL;
}

/* The table clients read, laid out from what b gathered: its header, rows and strings. 0,
 * or -1 when it is over CHAN_PROCADDR_MAX (said) or memory ran out. */
static int lay_out(const struct builder *b, int driver)
{
    uint64_t len = sizeof(struct chan_procaddr_head) + b->nrows * sizeof(struct chan_procaddr_row) +
                   b->nstrings;
    if (len > CHAN_PROCADDR_MAX) {
        srv_log("cuGetProcAddress table of %llu bytes is over the limit of %u: clients answer "
                "from the 580 driver's table",
                (unsigned long long)len, CHAN_PROCADDR_MAX);
        return -1;
    }
    table = malloc(len);
    if (!table) return -1;
    struct chan_procaddr_head h = {CHAN_PROCADDR_MAGIC, driver, (uint32_t)b->nrows,
                                   (uint32_t)b->nstrings};
    memcpy(table, &h, sizeof(h));
    memcpy(table + sizeof(h), b->rows, b->nrows * sizeof(*b->rows));
    memcpy(table + sizeof(h) + b->nrows * sizeof(*b->rows), b->strings, b->nstrings);
    table_len = (uint32_t)len;
    return 0;
}

int srv_procaddr_build(void *drv)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    getproc_fn get = drv ? (getproc_fn)dlsym(drv, "cuGetProcAddress_v2") : NULL;
    if (!get) {
        srv_log("The driver has no cuGetProcAddress_v2: clients answer cuGetProcAddress from "
                "the 580 driver's table");
        return -1;
    }
    int driver = 0;
    if (DRV(cuDriverGetVersion)(&driver) != CUDA_SUCCESS) driver = 0;
    size_t nnames = 0, nversions = 0, nknown = 0;
    const char **names = names_to_ask(&nnames);
    int *versions = versions_to_ask(driver, &nversions);
    struct addr_name *known = malloc(SHIM_NCALLS * sizeof(*known));
    struct builder b = {0};
    int ret = -1, aliased = 0;
    size_t unnamed = 0, queries = 0;
    const char *first_unnamed = NULL;
    if (!names || !versions || !known) goto out;
    for (int i = 0; i < SHIM_NCALLS; i++) {
        void *f = shim_calls[i].cls != SHIM_ABSENT ? dlsym(drv, shim_calls[i].name) : NULL;
        if (f) known[nknown++] = (struct addr_name){(uintptr_t)f, shim_calls[i].name};
    }
    qsort(known, nknown, sizeof(*known), cmp_addr);
    for (size_t n = 0; n < nnames && !b.failed; n++) {
        size_t first = b.nrows;
        int all_absent = 1;
        for (int flags = 0; flags <= 2; flags++) {
            const char *prev_sym = NULL;
            CUresult prev_res = CUDA_SUCCESS;
            int prev_st = 0, have_prev = 0;
            for (size_t v = 0; v < nversions; v++) {
                void *p = NULL;
                CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)0x7eadbeef;
                CUresult res = get(names[n], &p, versions[v], (cuuint64_t)flags, &st);
                queries++;
                const char *sym = NULL;
                int status = (int)st == 0x7eadbeef ? -1 : (int)st;
                if (res == CUDA_SUCCESS && p) {
                    sym = name_of(known, nknown, names[n], p, &aliased);
                    if (!sym) {
                        /* A pointer that is no exported symbol cannot be named to a client. */
                        if (!unnamed++) first_unnamed = names[n];
                        res = CUDA_ERROR_NOT_FOUND;
                        status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
                    }
                }
                if (sym || res != CUDA_ERROR_NOT_FOUND ||
                    status != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
                    all_absent = 0;
                if (have_prev && (sym ? prev_sym && strcmp(sym, prev_sym) == 0
                                      : !prev_sym && res == prev_res && status == prev_st))
                    continue;
                struct chan_procaddr_row r = {
                    .name = intern(&b, names[n]),
                    .symbol = sym ? intern(&b, sym) : CHAN_PROCADDR_NONE,
                    .version = versions[v],
                    .flags = flags,
                    .result = sym ? 0 : (int32_t)res,
                    .status = sym ? 0 : status,
                };
                add_row(&b, &r);
                prev_sym = sym;
                prev_res = res;
                prev_st = status;
                have_prev = 1;
            }
        }
        /* A name the driver does not know at all answers as a name without rows does. */
        if (all_absent) b.nrows = first;
    }
    if (b.failed || lay_out(&b, driver) != 0) goto out;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    srv_log("cuGetProcAddress: %zu names x %zu versions x 3 flags (%zu queries) asked in %.1f ms: "
            "%zu rows, %u bytes for clients",
            nnames, nversions, queries,
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
            b.nrows, table_len);
    if (unnamed)
        srv_log("cuGetProcAddress: %zu answers were no exported symbol (first for %s): answered "
                "as not found",
                unnamed, first_unnamed);
    if (aliased)
        srv_log("cuGetProcAddress: the driver exports one function under several names; each "
                "answer names one of them");
    ret = 0;
out:
    if (b.failed)
        srv_log("cuGetProcAddress table: out of memory: clients answer from the 580 driver's "
                "table");
    struct str *e, *tmp;
    HASH_ITER(hh, b.interned, e, tmp) {
        HASH_DEL(b.interned, e);
        free((char *)e->s);
        free(e);
    }
    free(b.rows);
    free(b.strings);
    free(known);
    free(versions);
    free(names);
    return ret;
}

void srv_op_procaddr(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    uint32_t off; /* the payload is one (its %op row) */
    (void)len;
    memcpy(&off, p, sizeof(off));
    if (!table) {
        srv_reply(c, r->lane, CUDA_ERROR_NOT_FOUND, 0);
        return;
    }
    if (off > table_len) {
        srv_reply(c, r->lane, CUDA_ERROR_INVALID_VALUE, 0);
        return;
    }
    struct chan_procaddr_page pg = {.total = table_len};
    uint32_t n = table_len - off;
    if (n > CHAN_LANE_DATA - sizeof(pg)) n = CHAN_LANE_DATA - (uint32_t)sizeof(pg);
    uint8_t *out = srv_lane_data(c, r->lane);
    memcpy(out, &pg, sizeof(pg));
    memcpy(out + sizeof(pg), table + off, n);
    srv_reply(c, r->lane, CUDA_SUCCESS, (uint32_t)sizeof(pg) + n);
}
