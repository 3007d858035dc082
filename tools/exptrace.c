/* exptrace: an LD_AUDIT module that logs how a program uses the real driver's hidden export
 * tables (cuGetExportTable), to learn what mpsshim's tables must do (interpose/export_*.c).
 * A developer's tool for the GPU machine; nothing of mpsshim runs with it.
 *
 *   LD_AUDIT=build/tools/libexptrace.so python3 prog.py 2>trace.txt
 *
 * It catches cuGetProcAddress(_v2) and cuGetExportTable however they are bound (by the
 * dynamic linker, dlsym or cuGetProcAddress itself), hands out for every table that starts
 * with a size word a copy whose slots log each call: the slot, six integer arguments, the
 * result, and the first words behind each argument that points at readable memory, before
 * and after the call (read with process_vm_readv, so a wrong guess cannot fault), and the
 * library that called (dladdr). Twelve integer arguments are passed on, so slots of up to
 * twelve (the extra ones on the stack) reach the driver intact; floating-point arguments
 * are not expected in these tables. EXPTRACE_MAX (default 8) calls of each slot are logged
 * in full, the rest counted; EXPTRACE_PASS=uuid,uuid hands those tables out untouched. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define NTAB 16
#define NSLOT 128
#define DUMP_WORDS 6

typedef uint64_t (*slot_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                            uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

static struct table {
    CUuuid id;
    const void *const *real;
    size_t nslots;
    const void *copy[NSLOT];
    unsigned long calls[NSLOT];
} tabs[NTAB];
static int ntabs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long max_logged = 8;

static CUresult (*real_export)(const void **, const CUuuid *);
static CUresult (*real_proc)(const char *, void **, int, cuuint64_t);
static CUresult (*real_proc2)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

static void hex(char *out, const CUuuid *id)
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)id->bytes[i]);
}

/* Up to n words at p, if readable: the count read. */
static int peek(uint64_t p, uint64_t *w, int n)
{
    if (p < 4096) return 0;
    struct iovec local = {w, n * sizeof(*w)}, remote = {(void *)p, n * sizeof(*w)};
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return got > 0 ? (int)(got / (ssize_t)sizeof(*w)) : 0;
}

static void dump(FILE *f, const char *when, const uint64_t a[6])
{
    for (int i = 0; i < 6; i++) {
        uint64_t w[DUMP_WORDS];
        int n = peek(a[i], w, DUMP_WORDS);
        if (!n) continue;
        fprintf(f, "exptrace:   %s *a%d:", when, i);
        for (int j = 0; j < n; j++)
            fprintf(f, " %#llx", (unsigned long long)w[j]);
        fputc('\n', f);
    }
}

/* The file name of the object holding code address pc, for the log. */
static const char *where(const void *pc)
{
    Dl_info info;
    if (!dladdr(pc, &info) || !info.dli_fname) return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static uint64_t call(int t, int s, const void *from, uint64_t a0, uint64_t a1, uint64_t a2,
                     uint64_t a3, uint64_t a4, uint64_t a5, const uint64_t more[6])
{
    struct table *tb = &tabs[t];
    slot_fn fn = (slot_fn)tb->real[s];
    unsigned long n = __atomic_add_fetch(&tb->calls[s], 1, __ATOMIC_RELAXED);
    int log = (long)n <= max_logged;
    uint64_t a[6] = {a0, a1, a2, a3, a4, a5};
    char id[33];
    hex(id, &tb->id);
    if (log) {
        flockfile(stderr);
        fprintf(stderr,
                "exptrace: %s[%d] call %lu from %s args %#llx %#llx %#llx %#llx %#llx %#llx"
                " (stack %#llx %#llx %#llx)\n",
                id, s, n, where(from), (unsigned long long)a0, (unsigned long long)a1,
                (unsigned long long)a2, (unsigned long long)a3, (unsigned long long)a4,
                (unsigned long long)a5, (unsigned long long)more[0], (unsigned long long)more[1],
                (unsigned long long)more[2]);
        dump(stderr, "before", a);
        funlockfile(stderr);
    }
    uint64_t r = fn(a0, a1, a2, a3, a4, a5, more[0], more[1], more[2], more[3], more[4], more[5]);
    if (log) {
        flockfile(stderr);
        fprintf(stderr, "exptrace: %s[%d] call %lu returned %#llx\n", id, s, n,
                (unsigned long long)r);
        dump(stderr, "after", a);
        funlockfile(stderr);
    }
    return r;
}

/* One wrapper per (table, slot): w_T_H_L serves slot H * 8 + L of table T. */
#define W(t, h, l)                                                                                 \
    static uint64_t w_##t##_##h##_##l(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e,  \
                                      uint64_t f, uint64_t g, uint64_t h_, uint64_t i, uint64_t j, \
                                      uint64_t k, uint64_t l_)                                     \
    {                                                                                              \
        const uint64_t more[6] = {g, h_, i, j, k, l_};                                             \
        return call(t, h * 8 + l, __builtin_return_address(0), a, b, c, d, e, f, more);            \
    }
// clang-format off: rows of macro calls that make functions, which clang-format joins
#define W8(t, h) W(t, h, 0) W(t, h, 1) W(t, h, 2) W(t, h, 3) W(t, h, 4) W(t, h, 5) W(t, h, 6) W(t, h, 7)
#define R8(t, h) w_##t##_##h##_0, w_##t##_##h##_1, w_##t##_##h##_2, w_##t##_##h##_3, \
                 w_##t##_##h##_4, w_##t##_##h##_5, w_##t##_##h##_6, w_##t##_##h##_7
#define W128(t) W8(t, 0) W8(t, 1) W8(t, 2) W8(t, 3) W8(t, 4) W8(t, 5) W8(t, 6) W8(t, 7) \
                W8(t, 8) W8(t, 9) W8(t, 10) W8(t, 11) W8(t, 12) W8(t, 13) W8(t, 14) W8(t, 15)
#define R128(t) {R8(t, 0), R8(t, 1), R8(t, 2), R8(t, 3), R8(t, 4), R8(t, 5), R8(t, 6), R8(t, 7), \
                 R8(t, 8), R8(t, 9), R8(t, 10), R8(t, 11), R8(t, 12), R8(t, 13), R8(t, 14), R8(t, 15)}
W128(0) W128(1) W128(2) W128(3) W128(4) W128(5) W128(6) W128(7)
W128(8) W128(9) W128(10) W128(11) W128(12) W128(13) W128(14) W128(15)
static const slot_fn wrappers[NTAB][NSLOT] = {R128(0),  R128(1),  R128(2),  R128(3),
                                              R128(4),  R128(5),  R128(6),  R128(7),
                                              R128(8),  R128(9),  R128(10), R128(11),
                                              R128(12), R128(13), R128(14), R128(15)};
// clang-format on

static CUresult my_export(const void **pp, const CUuuid *id)
{
    CUresult r = real_export(pp, id);
    char h[33];
    hex(h, id);
    uint64_t first = r == CUDA_SUCCESS && pp && *pp ? *(const uint64_t *)*pp : 0;
    fprintf(stderr, "exptrace: cuGetExportTable %s from %s -> %d, first word %#llx\n", h,
            where(__builtin_return_address(0)), (int)r, (unsigned long long)first);
    const char *pass = getenv("EXPTRACE_PASS");
    if (pass && strstr(pass, h)) return r;
    /* Tables that begin with their size in bytes (a multiple of 8 below 1 KiB), except
     * CUDART_INTERFACE and INTEGRITY_CHECK: the integrity hash covers their addresses, so
     * a copy makes cudart fail with cudaErrorSoftwareValidityNotEstablished. */
    static const char *const keep[] = {"6bd5fb6c5bf4e74a8987d93912fd9df9",
                                       "d4082055bde6704b8d34ba123c66e1f2"};
    if (r != CUDA_SUCCESS || !*pp || first < 16 || first > 8 * NSLOT || first % 8 ||
        !strcmp(h, keep[0]) || !strcmp(h, keep[1]))
        return r;
    pthread_mutex_lock(&lock);
    struct table *tb = NULL;
    for (int i = 0; i < ntabs && !tb; i++)
        if (!memcmp(&tabs[i].id, id, sizeof(*id))) tb = &tabs[i];
    if (!tb && ntabs < NTAB) {
        int t = ntabs++;
        tb = &tabs[t];
        tb->id = *id;
        tb->real = (const void *const *)*pp;
        tb->nslots = first / 8;
        tb->copy[0] = (const void *)first;
        for (size_t s = 1; s < tb->nslots; s++)
            tb->copy[s] = tb->real[s] ? (const void *)wrappers[t][s] : NULL;
    }
    pthread_mutex_unlock(&lock);
    if (tb) *pp = tb->copy;
    return r;
}

static CUresult my_proc(const char *sym, void **pfn, int ver, cuuint64_t flags);
static CUresult my_proc2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *st);

/* What the program gets for sym (asked for at CUDA version ver): ours for the entry points
 * that lead to tables, the driver's otherwise. */
static void *wrap(const char *sym, int ver, void *real)
{
    if (!strcmp(sym, "cuGetProcAddress_v2") || (!strcmp(sym, "cuGetProcAddress") && ver >= 12000)) {
        if (!real_proc2) real_proc2 = real;
        return (void *)my_proc2;
    }
    if (!strcmp(sym, "cuGetProcAddress")) {
        if (!real_proc) real_proc = real;
        return (void *)my_proc;
    }
    if (!strcmp(sym, "cuGetExportTable")) {
        real_export = real;
        return (void *)my_export;
    }
    return real;
}

static CUresult my_proc(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    CUresult r = real_proc(sym, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn && sym) *pfn = wrap(sym, ver, *pfn);
    return r;
}

static CUresult my_proc2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *st)
{
    CUresult r = real_proc2(sym, pfn, ver, flags, st);
    if (r == CUDA_SUCCESS && pfn && *pfn && sym) *pfn = wrap(sym, ver, *pfn);
    return r;
}

unsigned int la_version(unsigned int v)
{
    const char *m = getenv("EXPTRACE_MAX");
    if (m) max_logged = atol(m);
    return v;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
    (void)map;
    (void)lmid;
    (void)cookie;
    return LA_FLG_BINDTO | LA_FLG_BINDFROM;
}

uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *refcook, uintptr_t *defcook,
                       unsigned int *flags, const char *name)
{
    (void)ndx;
    (void)refcook;
    (void)defcook;
    (void)flags;
    if (strncmp(name, "cuGet", 5) != 0) return sym->st_value;
    /* A bound name is the plain symbol: cuGetProcAddress is the 4-argument one. */
    return (uintptr_t)wrap(name, !strcmp(name, "cuGetProcAddress") ? 11000 : 13000,
                           (void *)sym->st_value);
}
