/* The hidden export tables of the shim (cuGetExportTable), asked for by UUID as cudart asks:
 * each table's first word and slots, an unknown UUID refused with an error AND a NULL table,
 * and, with a server: context-local storage (put/get/delete, destructors on cuCtxDestroy and
 * on a primary reset), the TOOLS_TLS current-context round trip, the primary context of
 * CUDART_INTERFACE, module loading through its slots, the callback buffers, the context
 * checks and the integrity check's fixed answers.
 * usage: export_test LIBMPSSHIM [KERNEL_DIR]
 * Without a server (cuInit fails) only the table layout is checked. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

/* The driver API, from the shim. */
static CUresult (*get_table)(const void **, const CUuuid *);
static CUresult (*init)(unsigned);
static CUresult (*primary_retain)(CUcontext *, CUdevice);
static CUresult (*primary_release)(CUdevice);
static CUresult (*primary_reset)(CUdevice);
static CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice);
static CUresult (*ctx_destroy)(CUcontext);
static CUresult (*ctx_set)(CUcontext);
static CUresult (*ctx_get)(CUcontext *);
static CUresult (*ctx_get_id)(CUcontext, unsigned long long *);
static CUresult (*module_function)(CUfunction *, CUmodule, const char *);
static CUresult (*module_unload)(CUmodule);
static CUresult (*stream_create)(CUstream *, unsigned);
static CUresult (*stream_destroy)(CUstream);
static CUresult (*stream_get_id)(CUstream, unsigned long long *);

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "FAIL: the shim exports no %s\n", name);
        exit(1);
    }
    return p;
}

/* The table with this UUID (hex of its bytes in memory order), or NULL; *res gets the
 * result. The table pointer starts as garbage to see that a refusal writes NULL. */
static const void *const *table(const char *hex, CUresult *res)
{
    CUuuid id;
    for (int i = 0; i < 16; i++) {
        unsigned b;
        sscanf(hex + 2 * i, "%2x", &b);
        id.bytes[i] = (char)b;
    }
    const void *t = (const void *)(uintptr_t)0xdeadbeef;
    *res = get_table(&t, &id);
    return (const void *const *)t;
}

/* A table that must be served: its first word (bytes) and every slot up to it non-NULL. */
static const void *const *served(const char *hex, size_t first_word)
{
    CUresult r;
    const void *const *t = table(hex, &r);
    CHECK(r == CUDA_SUCCESS && t);
    if (r != CUDA_SUCCESS || !t) return NULL;
    CHECK((uintptr_t)t[0] == first_word);
    for (size_t i = 1; i < first_word / sizeof(void *); i++)
        CHECK(t[i] != NULL);
    return t;
}

#define CUDART "6bd5fb6c5bf4e74a8987d93912fd9df9"
#define TOOLS_TLS "42d85a8123f6cb478298f6e78a3aecdc"
#define HOOKS "a094798c2e742e7493f20800200c0a66"
#define CLS "c693336e1121df11a8c368f355d89593"
#define CHECKS "263e88607cd2614392f6bbd5006dfa7e"
#define INTEGRITY "d4082055bde6704b8d34ba123c66e1f2"
#define REFUSED "f8cff95121468b4eb9e2fb469e7c0dd9"
#define TOOLS_CONTEXT "21318c60971432488ca641ff7324c8f2"

typedef void (*cls_dtor)(CUcontext, void *, void *);
typedef CUresult (*cls_put_t)(CUcontext, void *, void *, cls_dtor);
typedef CUresult (*cls_delete_t)(CUcontext, void *);
typedef CUresult (*cls_get_t)(void **, CUcontext, void *);

/* What the destructor saw; only this thread runs destructors here. */
static int dtor_calls;
static CUcontext dtor_ctx;
static void *dtor_key, *dtor_value;

static void dtor(CUcontext ctx, void *key, void *value)
{
    dtor_calls++;
    dtor_ctx = ctx;
    dtor_key = key;
    dtor_value = value;
}

static void test_cls(const void *const *cls)
{
    cls_put_t put = (cls_put_t)cls[0];
    cls_delete_t del = (cls_delete_t)cls[1];
    cls_get_t get = (cls_get_t)cls[2];
    static int key1, key2;
    void *v = NULL;
    CUcontext prim, other;
    CHECK(primary_retain(&prim, 0) == CUDA_SUCCESS);
    CHECK(ctx_set(prim) == CUDA_SUCCESS);

    /* NULL context = current; explicit and implicit name the same entry. */
    CHECK(put(NULL, &key1, (void *)0x11, dtor) == CUDA_SUCCESS);
    CHECK(get(&v, NULL, &key1) == CUDA_SUCCESS && v == (void *)0x11);
    CHECK(get(&v, prim, &key1) == CUDA_SUCCESS && v == (void *)0x11);
    CHECK(put(prim, &key1, (void *)0x12, dtor) == CUDA_SUCCESS);
    CHECK(get(&v, NULL, &key1) == CUDA_SUCCESS && v == (void *)0x12);
    CHECK(get(&v, prim, &key2) != CUDA_SUCCESS);
    CHECK(del(prim, &key1) == CUDA_SUCCESS);
    CHECK(get(&v, prim, &key1) != CUDA_SUCCESS);
    CHECK(dtor_calls == 0); /* delete does not run the destructor */

    /* A created context has a map of its own; destroying it runs its destructors. */
    CHECK(ctx_create(&other, 0, 0) == CUDA_SUCCESS);
    CHECK(put(other, &key1, (void *)0x21, dtor) == CUDA_SUCCESS);
    CHECK(put(other, &key2, (void *)0x22, NULL) == CUDA_SUCCESS);
    CHECK(put(prim, &key1, (void *)0x31, dtor) == CUDA_SUCCESS);
    CHECK(get(&v, other, &key1) == CUDA_SUCCESS && v == (void *)0x21);
    CHECK(get(&v, prim, &key1) == CUDA_SUCCESS && v == (void *)0x31);
    CHECK(ctx_destroy(other) == CUDA_SUCCESS);
    CHECK(dtor_calls == 1 && dtor_ctx == other && dtor_key == &key1 && dtor_value == (void *)0x21);
    CHECK(get(&v, other, &key1) != CUDA_SUCCESS);
    CHECK(get(&v, prim, &key1) == CUDA_SUCCESS && v == (void *)0x31);

    /* A primary reset runs the primary context's destructors; the handle stays usable. */
    CHECK(primary_reset(0) == CUDA_SUCCESS);
    CHECK(dtor_calls == 2 && dtor_ctx == prim && dtor_value == (void *)0x31);
    CHECK(get(&v, prim, &key1) != CUDA_SUCCESS);
    CHECK(primary_retain(&prim, 0) == CUDA_SUCCESS);
    CHECK(ctx_set(prim) == CUDA_SUCCESS);
    CHECK(put(NULL, &key2, (void *)0x41, dtor) == CUDA_SUCCESS);
    CHECK(get(&v, prim, &key2) == CUDA_SUCCESS && v == (void *)0x41);
    /* Releasing the last reference destroys the primary context: destructors run. */
    CHECK(primary_release(0) == CUDA_SUCCESS);
    CHECK(primary_release(0) == CUDA_SUCCESS);
    CHECK(dtor_calls == 3 && dtor_value == (void *)0x41);

    /* No context at all: an error, not a crash. */
    CHECK(ctx_set(NULL) == CUDA_SUCCESS);
    while (ctx_get(&other) == CUDA_SUCCESS && other)
        ctx_set(NULL);
    CHECK(get(&v, NULL, &key1) != CUDA_SUCCESS);
    CHECK(put(NULL, &key1, (void *)1, NULL) != CUDA_SUCCESS);
}

static void test_tls(const void *const *tls)
{
    CUresult (*set)(CUcontext) = (CUresult(*)(CUcontext))tls[1];
    CUresult (*get)(CUcontext *) = (CUresult(*)(CUcontext *))tls[2];
    CUcontext a, b, cur = NULL;
    CHECK(ctx_create(&a, 0, 0) == CUDA_SUCCESS);
    CHECK(ctx_create(&b, 0, 0) == CUDA_SUCCESS); /* current now */
    CHECK(set(a) == CUDA_SUCCESS);
    CHECK(ctx_get(&cur) == CUDA_SUCCESS && cur == a);
    CHECK(get(&cur) == CUDA_SUCCESS && cur == a);
    CHECK(ctx_set(b) == CUDA_SUCCESS);
    CHECK(get(&cur) == CUDA_SUCCESS && cur == b);
    CHECK(ctx_destroy(a) == CUDA_SUCCESS);
    CHECK(ctx_destroy(b) == CUDA_SUCCESS);
}

struct fatbin_wrapper {
    int magic, version;
    const void *data;
    void *filename_or_fatbins;
};

/* Reads a whole file, or NULL. */
static void *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* TOOLS_MODULE slot 7 (cuFFT's module walk): the callback once per function, with the
 * function and its name, in cuModuleEnumerateFunctions's order; the count returned. */
static const void *const *tools_module;
static CUresult (*func_count)(unsigned *, CUmodule);
static CUresult (*func_enum)(CUfunction *, unsigned, CUmodule);
static CUresult (*func_name)(const char **, CUfunction);
struct visit_log {
    unsigned n;
    CUfunction fn[64];
    const char *name[64];
};

static void visit(void *user, CUfunction fn, const char *name)
{
    struct visit_log *v = user;
    if (v->n < 64) {
        v->fn[v->n] = fn;
        v->name[v->n] = name;
    }
    v->n++;
}

static void test_tools_module(CUmodule m)
{
    typedef uint64_t (*walk_t)(CUcontext, CUmodule, void (*)(void *, CUfunction, const char *),
                               void *, CUmodule, void *);
    walk_t walk = (walk_t)tools_module[7];
    unsigned n = 0;
    CUfunction fns[64];
    struct visit_log v = {0};
    CHECK(func_count(&n, m) == CUDA_SUCCESS && n > 1 && n <= 64);
    CHECK(func_enum(fns, n, m) == CUDA_SUCCESS);
    CHECK(walk(NULL, m, visit, &v, m, NULL) == n && v.n == n);
    for (unsigned i = 0; i < n && i < 64; i++) {
        const char *want = NULL;
        CHECK(v.fn[i] == fns[i]);
        CHECK(func_name(&want, fns[i]) == CUDA_SUCCESS && v.name[i] && !strcmp(v.name[i], want));
    }
    CHECK(walk(NULL, m, NULL, &v, m, NULL) == CUDA_ERROR_INVALID_VALUE);
}

static void test_cudart(const void *const *t, const char *kdir)
{
    CUresult (*primary)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))t[2];
    CUcontext p = NULL, q = NULL;
    CHECK(primary(&p, 0) == CUDA_SUCCESS && p);
    CHECK(primary(&q, 9999) != CUDA_SUCCESS);
    CHECK(primary_retain(&q, 0) == CUDA_SUCCESS && q == p);
    CHECK(ctx_set(q) == CUDA_SUCCESS);

    char path[4096];
    snprintf(path, sizeof(path), "%s/kernels.fatbin", kdir);
    void *fatbin = slurp(path);
    if (!fatbin) {
        printf("no %s: module slots not checked\n", path);
    } else {
        struct fatbin_wrapper w = {0x466243b1, 1, fatbin, NULL};
        CUresult (*load1)(CUmodule *, const void *) = (CUresult(*)(CUmodule *, const void *))t[1];
        CUresult (*load6)(CUmodule *, const void *, void *, void *, unsigned) =
            (CUresult(*)(CUmodule *, const void *, void *, void *, unsigned))t[6];
        CUresult (*load8)(const void *, CUmodule *, void *, void *, unsigned) =
            (CUresult(*)(const void *, CUmodule *, void *, void *, unsigned))t[8];
        CUmodule m[3] = {0};
        CUfunction f;
        CHECK(load1(&m[0], &w) == CUDA_SUCCESS);
        CHECK(load6(&m[1], &w, NULL, NULL, 0) == CUDA_SUCCESS);
        CHECK(load8(fatbin, &m[2], NULL, NULL, 0) == CUDA_SUCCESS);
        if (tools_module) test_tools_module(m[0]);
        for (int i = 0; i < 3; i++) {
            CHECK(module_function(&f, m[i], "vec_add") == CUDA_SUCCESS);
            CHECK(module_unload(m[i]) == CUDA_SUCCESS);
        }
        CUmodule x;
        int dummy;
        CHECK(load6(&x, &w, &dummy, NULL, 0) != CUDA_SUCCESS); /* unusual arguments refused */
        free(fatbin);
    }
    CUresult (*noop7)(size_t) = (CUresult(*)(size_t))t[7];
    CUresult (*noop12)(void) = (CUresult(*)(void))t[12];
    CHECK(noop7(0) == CUDA_SUCCESS && noop12() == CUDA_SUCCESS);
    CHECK(primary_release(0) == CUDA_SUCCESS);
}

static void test_small_tables(const void *const *hooks, const void *const *checks,
                              const void *const *integrity)
{
    for (int slot = 2; slot <= 6; slot += 4) {
        void (*buf)(void **, size_t *) = (void (*)(void **, size_t *))hooks[slot];
        void *p = NULL;
        size_t n = 0;
        buf(&p, &n);
        CHECK(p && n > 0);
        for (size_t i = 0; p && i < n; i++)
            CHECK(((unsigned char *)p)[i] == 0);
    }
    CHECK(((CUresult(*)(void))hooks[1])() == CUDA_SUCCESS);
    CHECK(((CUresult(*)(void))hooks[4])() == CUDA_SUCCESS);

    CUresult (*kind)(CUcontext, uint32_t *, const void **) =
        (CUresult(*)(CUcontext, uint32_t *, const void **))checks[2];
    uint32_t type = 7;
    const void *second = (const void *)0x1234;
    CHECK(kind(NULL, &type, &second) == CUDA_SUCCESS && type == 0 &&
          second == (const void *)0x1234);
    CHECK(((uint32_t (*)(void))checks[3])() == 0);

    CUresult (*hash)(uint32_t, uint64_t, uint64_t *) =
        (CUresult(*)(uint32_t, uint64_t, uint64_t *))integrity[1];
    uint64_t a[2] = {0}, b[2] = {0};
    CHECK(hash(13000, 1, a) == CUDA_SUCCESS && a[0] == 0x3341181c03cb675cull &&
          a[1] == 0x8ed383aa1f4cd1e8ull);
    CHECK(hash(13001, 1, a) == CUDA_SUCCESS && a[0] == 0x1841181c03cb675cull &&
          a[1] == 0x8ed383aa1f4cd1e8ull);
    /* The hash proper (cudart checks its value: the CI's cudart programs are that test):
     * the same inputs give the same answer, another time another. */
    CHECK(hash(13002, 1700000000, a) == CUDA_SUCCESS);
    CHECK(hash(13002, 1700000000, b) == CUDA_SUCCESS && a[0] == b[0] && a[1] == b[1]);
    CHECK(hash(13002, 1700000001, b) == CUDA_SUCCESS && (a[0] != b[0] || a[1] != b[1]));
}

/* TOOLS_CONTEXT: slot 4 is the context's id (cuBLAS needs it); 51 and 39 a stream's object
 * and its id (cuBLAS on the NULL stream); the others refuse. */
static void test_tools_context(const void *const *t)
{
    typedef CUresult (*id_t)(CUcontext, unsigned long long *);
    typedef CUresult (*unknown_t)(void);
    typedef CUresult (*object_t)(CUcontext, CUstream, CUstream *);
    typedef CUresult (*stream_id_t)(CUcontext, CUstream, unsigned long long *);
    id_t id = (id_t)t[4];
    object_t object = (object_t)t[51];
    stream_id_t stream_id = (stream_id_t)t[39];
    CUcontext prim;
    unsigned long long a = 0, b = 0, want = 0;
    CHECK(primary_retain(&prim, 0) == CUDA_SUCCESS);
    CHECK(ctx_set(prim) == CUDA_SUCCESS);
    CHECK(ctx_get_id(prim, &want) == CUDA_SUCCESS);
    CHECK(id(prim, &a) == CUDA_SUCCESS && a == want);
    CHECK(id(NULL, &b) == CUDA_SUCCESS && b == want); /* NULL: the current context */
    CHECK(id(prim, NULL) == CUDA_ERROR_INVALID_VALUE);
    CHECK(((unknown_t)t[3])() == CUDA_ERROR_NOT_SUPPORTED);
    /* Slot 51 then 39 give what cuStreamGetId gives, for the NULL stream and another. */
    CUstream made, obj = NULL;
    unsigned long long sid = 0, want_null = 0, want_made = 0;
    CHECK(stream_create(&made, 0) == CUDA_SUCCESS);
    CHECK(stream_get_id(NULL, &want_null) == CUDA_SUCCESS);
    CHECK(stream_get_id(made, &want_made) == CUDA_SUCCESS && want_made != want_null);
    CHECK(object(prim, NULL, &obj) == CUDA_SUCCESS && obj != NULL);
    CHECK(stream_id(prim, obj, &sid) == CUDA_SUCCESS && sid == want_null);
    CHECK(object(prim, made, &obj) == CUDA_SUCCESS);
    CHECK(stream_id(prim, obj, &sid) == CUDA_SUCCESS && sid == want_made);
    /* Refusals as the real driver's: no output, no context, no stream, no object. */
    CHECK(object(prim, made, NULL) == CUDA_ERROR_INVALID_VALUE);
    CHECK(object(NULL, made, &obj) == CUDA_ERROR_INVALID_HANDLE);
    CHECK(object(prim, (CUstream)(uintptr_t)0xdead0, &obj) != CUDA_SUCCESS);
    CHECK(stream_id(prim, NULL, &sid) == CUDA_ERROR_INVALID_VALUE);
    CHECK(stream_destroy(made) == CUDA_SUCCESS);
    CHECK(primary_release(0) == CUDA_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: export_test LIBMPSSHIM [KERNEL_DIR]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    get_table = (CUresult(*)(const void **, const CUuuid *))sym(h, "cuGetExportTable");
    init = (CUresult(*)(unsigned))sym(h, "cuInit");
    primary_retain = (CUresult(*)(CUcontext *, CUdevice))sym(h, "cuDevicePrimaryCtxRetain");
    primary_release = (CUresult(*)(CUdevice))sym(h, "cuDevicePrimaryCtxRelease_v2");
    primary_reset = (CUresult(*)(CUdevice))sym(h, "cuDevicePrimaryCtxReset_v2");
    ctx_create = (CUresult(*)(CUcontext *, unsigned, CUdevice))sym(h, "cuCtxCreate_v2");
    ctx_destroy = (CUresult(*)(CUcontext))sym(h, "cuCtxDestroy_v2");
    ctx_set = (CUresult(*)(CUcontext))sym(h, "cuCtxSetCurrent");
    ctx_get = (CUresult(*)(CUcontext *))sym(h, "cuCtxGetCurrent");
    ctx_get_id = (CUresult(*)(CUcontext, unsigned long long *))sym(h, "cuCtxGetId");
    module_function =
        (CUresult(*)(CUfunction *, CUmodule, const char *))sym(h, "cuModuleGetFunction");
    module_unload = (CUresult(*)(CUmodule))sym(h, "cuModuleUnload");
    stream_create = (CUresult(*)(CUstream *, unsigned))sym(h, "cuStreamCreate");
    stream_destroy = (CUresult(*)(CUstream))sym(h, "cuStreamDestroy_v2");
    stream_get_id = (CUresult(*)(CUstream, unsigned long long *))sym(h, "cuStreamGetId");
    func_count = (CUresult(*)(unsigned *, CUmodule))sym(h, "cuModuleGetFunctionCount");
    func_enum = (CUresult(*)(CUfunction *, unsigned, CUmodule))sym(h, "cuModuleEnumerateFunctions");
    func_name = (CUresult(*)(const char **, CUfunction))sym(h, "cuFuncGetName");

    /* Layout: first words as the 580 driver's, every slot callable. */
    const void *const *cudart = served(CUDART, 104);
    const void *const *tls = served(TOOLS_TLS, 24);
    const void *const *hooks = served(HOOKS, 56);
    const void *const *checks = served(CHECKS, 120);
    const void *const *integrity = served(INTEGRITY, 24);
    const void *const *tools_context = served(TOOLS_CONTEXT, 744);
    tools_module = served("6e163fbeb958444d835ce182aff1991e", 792);
    CUresult r;
    const void *const *cls = table(CLS, &r);
    CHECK(r == CUDA_SUCCESS && cls && cls[0] && cls[1] && cls[2]); /* no size word */
    const void *const *t = table(REFUSED, &r);
    CHECK(r != CUDA_SUCCESS && t == NULL);
    /* cuBLASLt's table comes from a real driver loaded in the process: served as the 580
     * driver's (17 slots) where there is one, else refused with a NULL table. */
    t = table("1734dc26800d47458726c0f1e7dd8bca", &r);
    CHECK(r == CUDA_SUCCESS ? t && (uintptr_t)t[0] == 136 : t == NULL);
    t = table("00112233445566778899aabbccddeeff", &r);
    CHECK(r != CUDA_SUCCESS && t == NULL);
    CHECK(get_table(NULL, (const CUuuid *)CUDART) == CUDA_ERROR_INVALID_VALUE);
    const void *p;
    CHECK(get_table(&p, NULL) == CUDA_ERROR_INVALID_VALUE);
    printf("table layout checked\n");

    if (init(0) != CUDA_SUCCESS) {
        printf("cuInit failed (no server?): context checks skipped\n");
    } else if (cudart && tls && hooks && checks && integrity && cls) {
        test_cudart(cudart, argc > 2 ? argv[2] : ".");
        test_tls(tls);
        test_cls(cls);
        test_small_tables(hooks, checks, integrity);
        if (tools_context) test_tools_context(tools_context);
        printf("tables checked against a server\n");
    }
    if (failures) printf("%d checks failed\n", failures);
    return failures ? 1 : 0;
}
