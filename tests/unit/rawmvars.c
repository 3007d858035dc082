/* The hostile mode's __managed__ variable transfers (tests/unit/rawclient.c, rawhostile.c):
 * CHAN_OP_MVAR records naming memory that is not such a variable of the client's own, or
 * that is not migrating managed memory of its own, each refused; its own served. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "channel/fdpass.h"
#include "tests/unit/rawclient.h"

/* Loads managed.fatbin ($MPSSHIM_TEST_KERNELS) as a module of the session's context 1 and
 * looks its mv_arr up (1 KiB, a __managed__ variable); 0 when there is none. */
static CUdeviceptr managed_var(struct raw_session *x)
{
    char path[512];
    const char *dir = getenv("MPSSHIM_TEST_KERNELS");
    snprintf(path, sizeof(path), "%s/managed.fatbin", dir ? dir : ".");
    FILE *f = fopen(path, "rb");
    static uint8_t img[1 << 20];
    size_t n = f ? fread(img, 1, sizeof(img), f) : 0;
    if (f) fclose(f);
    if (!n) return 0;
    if (raw_blob(x, img, n) != 0) return 0;
    struct chan_module_load ml = {.kind = CHAN_IMAGE_MODULE, .njit = 0, .image_size = n};
    struct chan_module_loaded got = {0};
    if (raw_request(x, CHAN_OP_MODULE_LOAD, &ml, sizeof(ml), &got, sizeof(got)) != CUDA_SUCCESS)
        return 0;
    CUdeviceptr d = 0, *pd = &d;
    size_t bytes = 0, *pb = &bytes;
    CUmodule m = (CUmodule)(uintptr_t)got.handle;
    const char *name = "mv_arr";
    const void *a[] = {&pd, &pb, &m, &name};
    uint64_t out[2] = {0, 0}; /* the reply: the address, then the size */
    if (raw_call(x, SHIM_ID_cuModuleGetGlobal_v2, a, out, sizeof(out)) != CUDA_SUCCESS ||
        out[1] != 1024)
        return 0;
    return out[0];
}

/* A CHAN_OP_MVAR request: what, n entries, then `data` bytes (zeros), buf. */
static CUresult mvar_request(struct raw_session *x, uint32_t what, uint32_t n,
                             const struct chan_mvar_ent *e, size_t ents, size_t data, uint64_t buf)
{
    static uint8_t m[CHAN_REC_MAX];
    struct chan_mvar h = {.what = what, .n = n, .buf = buf};
    size_t len = sizeof(h) + ents * sizeof(*e) + data;
    if (len > sizeof(m) - sizeof(struct chan_rec)) return CUDA_ERROR_UNKNOWN;
    memset(m, 0, len);
    memcpy(m, &h, sizeof(h));
    memcpy(m + sizeof(h), e, ents * sizeof(*e));
    return raw_request(x, CHAN_OP_MVAR, m, len, NULL, 0);
}

/* __managed__ variable transfers that name what the client may not. */
void raw_hostile_mvars(struct raw_session *x, CUdeviceptr dev)
{
    struct raw_session y;
    CUdeviceptr v = managed_var(x), theirs = 0;
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (raw_session_open(&y) == 0 &&
        raw_request(&y, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) == CUDA_SUCCESS)
        theirs = managed_var(&y);
    printf("%-58s %s\n", "a __managed__ variable of its own, and another's",
           v && theirs ? "ok" : "FAILED");
    raw_failures += !v || !theirs;
    if (!v || !theirs) return;
    struct chan_mvar_ent e = {.dptr = v, .len = 16};
    CUresult r = mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0);
    printf("%-58s %s\n", "push of 16 bytes into its own variable",
           r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
    e.dptr = theirs;
    raw_expect_refused("push into another client's variable",
                       mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    raw_expect_refused("read of another client's variable",
                       mvar_request(x, CHAN_MVAR_READ, 1, &e, 1, 0, 0));
    e.dptr = dev;
    raw_expect_refused("push into device memory of its own",
                       mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    e.dptr = v + 1020;
    raw_expect_refused("push past the variable's end",
                       mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    e = (struct chan_mvar_ent){.dptr = v, .len = UINT64_MAX - 8};
    raw_expect_refused("push whose length wraps", mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    e = (struct chan_mvar_ent){.dptr = v, .len = 32};
    raw_expect_refused("push with fewer bytes than its entries say",
                       mvar_request(x, CHAN_MVAR_PUSH, 1, &e, 1, 16, 0));
    raw_expect_refused("push claiming 2^31 entries",
                       mvar_request(x, CHAN_MVAR_PUSH, 1u << 31, &e, 1, 16, 0));
    raw_expect_refused("pull into device memory of its own",
                       mvar_request(x, CHAN_MVAR_PULL, 1, &e, 1, 0, dev));
    e.off = UINT64_MAX - 8;
    raw_expect_refused("pull whose destination wraps",
                       mvar_request(x, CHAN_MVAR_PULL, 1, &e, 1, 0, dev));
    struct chan_mvar_ent many[80];
    for (int i = 0; i < 80; i++)
        many[i] = (struct chan_mvar_ent){.dptr = v, .len = 1024};
    raw_expect_refused("read of more than a reply lane holds",
                       mvar_request(x, CHAN_MVAR_READ, 80, many, 80, 0, 0));
    /* Migrating managed memory's transfers (server/memory/migrate.c) name only that: one of
     * its own moves both ways; another client naming it, or past its end, is refused. */
    struct chan_host_alloc ha = {
        .bytes = 1u << 20, .flags = CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE | CU_MEM_ATTACH_GLOBAL};
    uint64_t rep[2] = {0, 0};
    r = raw_request(x, CHAN_OP_HOST_ALLOC, &ha, sizeof(ha), rep, sizeof(rep));
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
    raw_failures += r != CUDA_SUCCESS;
    /* A pull a stream waits for (a prefetch to the host): on a stream of its own (the legacy
     * NULL stream, off 0), after all its work; refused without that, on a stream that is not
     * its own, or with entries naming two streams. */
    struct chan_mvar_ent two[2] = {{.dptr = rep[0], .len = 4096, .off = 0},
                                   {.dptr = rep[0] + 65536, .len = 4096, .off = 0}};
    r = mvar_request(x, CHAN_MVAR_MPULL, 2, two, 2, 0,
                     CHAN_MPULL_AFTER_WORK | CHAN_MPULL_ON_STREAM);
    printf("%-58s %s\n", "migrating pull its NULL stream waits for",
           r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
    raw_expect_refused("migrating pull on a stream, not after all work",
                       mvar_request(x, CHAN_MVAR_MPULL, 2, two, 2, 0, CHAN_MPULL_ON_STREAM));
    two[1].off = 0x7f00dead0000ull;
    raw_expect_refused("migrating pull whose entries name two streams",
                       mvar_request(x, CHAN_MVAR_MPULL, 2, two, 2, 0,
                                    CHAN_MPULL_AFTER_WORK | CHAN_MPULL_ON_STREAM));
    two[0].off = two[1].off;
    raw_expect_refused("migrating pull a stream not its own waits for",
                       mvar_request(x, CHAN_MVAR_MPULL, 2, two, 2, 0,
                                    CHAN_MPULL_AFTER_WORK | CHAN_MPULL_ON_STREAM));
    raw_expect_refused("migrating pull of another client's allocation",
                       mvar_request(&y, CHAN_MVAR_MPULL, 1, &e, 1, 0, 0));
    e = (struct chan_mvar_ent){.dptr = rep[0] + (1u << 20) - 8, .len = 16};
    raw_expect_refused("migrating push past its allocation's end",
                       mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 0, 0));
    e = (struct chan_mvar_ent){.dptr = dev, .len = 16};
    raw_expect_refused("migrating push into device memory",
                       mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 0, 0));
    raw_expect_refused("migrating pull from device memory",
                       mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, CHAN_MPULL_AFTER_WORK));
    e.dptr = theirs;
    raw_expect_refused("migrating pull from another client's variable",
                       mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, 0));
    raw_expect_refused("migrating pull with unknown flags",
                       mvar_request(x, CHAN_MVAR_MPULL, 1, &e, 1, 0, 0x80));
    raw_expect_refused("migrating push with bytes after it",
                       mvar_request(x, CHAN_MVAR_MPUSH, 1, &e, 1, 16, 0));
    e = (struct chan_mvar_ent){.dptr = dev, .len = 16};
    raw_expect_refused("info on device memory", mvar_request(x, CHAN_MVAR_INFO, 1, &e, 1, 0, 0));
    raw_expect_refused("an unknown transfer", mvar_request(x, 99, 1, &e, 1, 0, 0));
    e = (struct chan_mvar_ent){.dptr = v, .len = 1024};
    r = mvar_request(x, CHAN_MVAR_READ, 1, &e, 1, 0, 0);
    printf("%-58s %s\n", "then a read of its own variable", r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
    munmap(y.base, y.size);
    close(y.sock);
}
