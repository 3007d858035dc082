/* The shim's cuGetProcAddress against the real 580 driver's answers, row by row
 * (gen/data/procaddress-*.tsv): same symbol for every (name, flags, version), and the same
 * status where the driver finds nothing.
 * usage: procaddr_test LIBMPSSHIM TSV (run without a server: MPSSHIM_AUTOSTART=0) */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: procaddr_test LIBMPSSHIM TSV\n");
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
    char name[256], answer[256];
    int flags, version;
    long rows = 0, bad = 0;
    static const cuuint64_t flag_of[3] = {CU_GET_PROC_ADDRESS_DEFAULT,
                                          CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
    while (fscanf(f, "%255s %d %d %255s", name, &flags, &version, answer) == 4) {
        rows++;
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-7;
        CUresult r = get(name, &fn, version, flag_of[flags % 3], &st);
        int want_r, want_s;
        if (sscanf(answer, "none:r%d:s%d", &want_r, &want_s) == 2) {
            int st_ok = want_s < 0 ? (int)st == -7 : (int)st == want_s;
            if ((int)r != want_r || !st_ok) {
                if (bad++ < 20)
                    printf("%s flags %d version %d: got %d/%d, driver %d/%d\n", name, flags,
                           version, (int)r, (int)st, want_r, want_s);
            }
        } else {
            void *want = dlsym(h, answer);
            if (r != CUDA_SUCCESS || fn != want || st != CU_GET_PROC_ADDRESS_SUCCESS) {
                if (bad++ < 20)
                    printf("%s flags %d version %d: got %d, %p; driver %s (%p)\n", name, flags,
                           version, (int)r, fn, answer, want);
            }
        }
    }
    fclose(f);
    /* Below 12000 the four-argument cuGetProcAddress itself is what comes back. */
    void *v1 = NULL;
    if (get("cuGetProcAddress", &v1, 11080, 0, NULL) != CUDA_SUCCESS ||
        v1 != dlsym(h, "cuGetProcAddress")) {
        printf("cuGetProcAddress at 11080 is not the v1 entry point\n");
        bad++;
    }
    printf("%ld rows checked, %ld differ from the real driver\n", rows, bad);
    return bad || rows < 4000 ? 1 : 0;
}
