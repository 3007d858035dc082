/* The raw client's hostile mode (tests/unit/rawclient.c): well-formed calls that bypass
 * every check the shim does: memsets and copies whose spans wrap 64 bits or pass the end of
 * its allocation, a module image whose header wraps, the cuGetProcAddress table read past
 * its end; then the __managed__ variable transfers (rawmvars.c), batched copies
 * (rawbatches.c) and synchronisations never waited for (rawwaits.c). Each must be refused,
 * and the server must go on serving it. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/unit/rawclient.h"

int raw_hostile(void)
{
    struct raw_session x;
    if (raw_session_with_ctx(&x) != 0) return 1;
    /* 4 KiB of its own. */
    CUdeviceptr d = 0, *pd = &d;
    size_t bytes = 4096;
    const void *aa[] = {&pd, &bytes};
    CUresult r = raw_call(&x, SHIM_ID_cuMemAlloc_v2, aa, &d, sizeof(d));
    if (r != CUDA_SUCCESS || !d) {
        fprintf(stderr, "cuMemAlloc_v2: %d\n", (int)r);
        return 1;
    }
    CUstream st = NULL;
    unsigned ui = 0;
    size_t n62 = (size_t)1 << 62, one = 1, huge_pitch = 0xfffffffffffffff8ull, w = 16;
    {
        const void *a[] = {&d, &ui, &n62, &st};
        raw_expect_refused("cuMemsetD32Async, N = 2^62 elements",
                           raw_call(&x, SHIM_ID_cuMemsetD32Async, a, NULL, 0));
        const void *b[] = {&d, &ui, &n62};
        raw_expect_refused("cuMemsetD32_v2, N = 2^62 elements",
                           raw_call(&x, SHIM_ID_cuMemsetD32_v2, b, NULL, 0));
    }
    {
        size_t h = 3;
        unsigned char uc = 0;
        const void *a[] = {&d, &huge_pitch, &uc, &w, &h};
        raw_expect_refused("cuMemsetD2D8_v2, pitch 0xfffffffffffffff8",
                           raw_call(&x, SHIM_ID_cuMemsetD2D8_v2, a, NULL, 0));
        size_t p2 = 4096, h2 = 1000;
        const void *b[] = {&d, &p2, &uc, &w, &h2};
        raw_expect_refused("cuMemsetD2D8_v2, 1000 rows of 4 KiB in 4 KiB",
                           raw_call(&x, SHIM_ID_cuMemsetD2D8_v2, b, NULL, 0));
        (void)one;
    }
    {
        /* Copies: the copy op's own record, sides far beyond the allocation or wrapping. */
        struct chan_copy m;
        memset(&m, 0, sizeof(m));
        m.src.kind = m.dst.kind = CHAN_MEM_DEVICE;
        m.src.device = m.dst.device = -1;
        m.src.addr = m.dst.addr = d;
        m.width = 16;
        m.height = 3;
        m.depth = 1;
        m.src.pitch = m.dst.pitch = huge_pitch;
        raw_expect_refused("copy, 3 rows of pitch 0xfffffffffffffff8",
                           raw_request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
        m.src.pitch = m.dst.pitch = 4096;
        m.height = 2;
        raw_expect_refused("copy, 2 rows of 4 KiB from a 4 KiB allocation",
                           raw_request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
        m.height = 1;
        m.width = (uint64_t)1 << 63;
        m.depth = 4;
        raw_expect_refused("copy, 2^63 bytes x 4 slices",
                           raw_request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
        m.width = 16;
        m.depth = 1;
        m.src.x = UINT64_MAX - 8;
        raw_expect_refused("copy, source offset 2^64 - 9",
                           raw_request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0));
    }
    {
        /* An ELF whose section table's end wraps 64 bits: uploaded, then loaded. */
        uint8_t img[256];
        memset(img, 0, sizeof(img));
        memcpy(img,
               "\x7f"
               "ELF",
               4);
        img[4] = 2; /* ELFCLASS64 */
        uint64_t shoff = UINT64_MAX - 63;
        uint16_t shentsize = 64, shnum = 2;
        memcpy(img + 0x28, &shoff, 8);
        memcpy(img + 0x3a, &shentsize, 2);
        memcpy(img + 0x3c, &shnum, 2);
        (void)raw_blob(&x, img, sizeof(img)); /* unsent, the load is refused all the same */
        struct chan_module_load ml = {
            .kind = CHAN_IMAGE_MODULE, .njit = 0, .image_size = sizeof(img)};
        raw_expect_refused("module image whose section table wraps 64 bits",
                           raw_request(&x, CHAN_OP_MODULE_LOAD, &ml, sizeof(ml), NULL, 0));
    }
    {
        /* The cuGetProcAddress table: read from past its end, or with a short request. */
        uint32_t off = 0xffffff00u;
        raw_expect_refused("procaddr table from offset 0xffffff00",
                           raw_request(&x, CHAN_OP_PROCADDR, &off, sizeof(off), NULL, 0));
        uint16_t half = 0;
        raw_expect_refused("procaddr table, a 2-byte request",
                           raw_request(&x, CHAN_OP_PROCADDR, &half, sizeof(half), NULL, 0));
        struct chan_procaddr_page pg = {0};
        off = 0;
        r = raw_request(&x, CHAN_OP_PROCADDR, &off, sizeof(off), &pg, sizeof(pg));
        printf("%-58s %s\n", "procaddr table from offset 0",
               r == CUDA_SUCCESS && pg.total ? "ok" : "FAILED");
        raw_failures += r != CUDA_SUCCESS || !pg.total;
    }
    raw_hostile_mvars(&x, d);
    raw_hostile_batches(&x, d);
    raw_hostile_waits(&x, d);
    /* Still serving: its own memory is still there to free. */
    const void *fa[] = {&d};
    r = raw_call(&x, SHIM_ID_cuMemFree_v2, fa, NULL, 0);
    printf("%-58s %s\n", "then cuMemFree_v2 of its own memory",
           r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
    munmap(x.base, x.size);
    close(x.sock);
    return raw_failures ? 1 : 0;
}
