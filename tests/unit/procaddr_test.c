/* The shim's cuGetProcAddress against a driver's answers (gen/data/procaddress-*.tsv):
 * for every (name, flags) of the table, at every version the table has a row at, the same
 * symbol, or the same result and status where the driver finds nothing.
 *
 * Without a server (MPSSHIM_AUTOSTART=0) the shim answers from its compiled-in table;
 * through a server, from the answers of the server's driver. MOVE (NAME:FROM:TO) says the
 * server's driver is the CPU test driver run with MPSSHIM_CPUDRV_PROCADDR=MOVE: NAME's
 * answer that holds from FROM in the table holds from TO there, and the shim must follow.
 * usage: procaddr_test LIBMPSSHIM TSV [MOVE] */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

struct row {
    char name[128], answer[128];
    int flags, version;
};

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: procaddr_test LIBMPSSHIM TSV [NAME:FROM:TO]\n");
        return 2;
    }
    char mname[128] = "";
    int mfrom = 0, mto = 0;
    if (argc == 4 && sscanf(argv[3], "%127[A-Za-z0-9_]:%d:%d", mname, &mfrom, &mto) != 3) {
        fprintf(stderr, "bad MOVE %s\n", argv[3]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    getproc_t get = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    FILE *f = fopen(argv[2], "r");
    if (!get || !f) {
        fprintf(stderr, "no cuGetProcAddress_v2 or no table\n");
        return 1;
    }
    size_t n = 0, cap = 8192;
    struct row *rows = malloc(cap * sizeof(*rows));
    int *versions = malloc(cap * sizeof(*versions));
    while (rows && versions && n < cap &&
           fscanf(f, "%127s %d %d %127s", rows[n].name, &rows[n].flags, &rows[n].version,
                  rows[n].answer) == 4) {
        versions[n] = rows[n].version;
        if (strcmp(rows[n].name, mname) == 0 && rows[n].version == mfrom) rows[n].version = mto;
        n++;
    }
    fclose(f);
    qsort(versions, n, sizeof(*versions), cmp_int);
    size_t nv = 0;
    for (size_t i = 0; i < n; i++)
        if (nv == 0 || versions[nv - 1] != versions[i]) versions[nv++] = versions[i];
    static const cuuint64_t flag_of[3] = {CU_GET_PROC_ADDRESS_DEFAULT,
                                          CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
    long checks = 0, bad = 0;
    /* Rows of one (name, flags) are contiguous in the table. */
    for (size_t g = 0; g < n;) {
        size_t e = g;
        while (e < n && strcmp(rows[e].name, rows[g].name) == 0 && rows[e].flags == rows[g].flags)
            e++;
        for (size_t v = 0; v < nv; v++) {
            const struct row *want = NULL;
            for (size_t i = g; i < e; i++)
                if (rows[i].version <= versions[v] && (!want || rows[i].version > want->version))
                    want = &rows[i];
            if (!want) continue; /* below the first row: the table says nothing */
            checks++;
            void *fn = (void *)1;
            CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-7;
            CUresult r = get(want->name, &fn, versions[v], flag_of[want->flags % 3], &st);
            int want_r, want_s;
            if (sscanf(want->answer, "none:r%d:s%d", &want_r, &want_s) == 2) {
                int st_ok = want_s < 0 ? (int)st == -7 : (int)st == want_s;
                if ((int)r != want_r || !st_ok) {
                    if (bad++ < 20)
                        printf("%s flags %d version %d: got %d/%d, driver %d/%d\n", want->name,
                               want->flags, versions[v], (int)r, (int)st, want_r, want_s);
                }
            } else {
                void *wfn = dlsym(h, want->answer);
                if (r != CUDA_SUCCESS || fn != wfn || st != CU_GET_PROC_ADDRESS_SUCCESS) {
                    Dl_info di = {0};
                    dladdr(fn, &di);
                    if (bad++ < 20)
                        printf("%s flags %d version %d: got %d, %s; driver %s\n", want->name,
                               want->flags, versions[v], (int)r, di.dli_sname ? di.dli_sname : "?",
                               want->answer);
                }
            }
        }
        g = e;
    }
    /* Below 12000 the four-argument cuGetProcAddress itself is what comes back. */
    void *v1 = NULL;
    if (get("cuGetProcAddress", &v1, 11080, 0, NULL) != CUDA_SUCCESS ||
        v1 != dlsym(h, "cuGetProcAddress")) {
        printf("cuGetProcAddress at 11080 is not the v1 entry point\n");
        bad++;
    }
    printf("%zu rows, %ld answers checked at %zu versions, %ld differ from the driver's\n", n,
           checks, nv, bad);
    return bad || n < 4000 ? 1 : 0;
}
