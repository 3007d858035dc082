/* flood: queues a great deal of asynchronous work behind a long kernel, as fast as the calls
 * return, then checks that all of it ran, in order. Through the shim it is what makes the
 * server hold queued work for a client (issue 11, item 3): the CI tier runs two of these
 * beside a bystander and watches the server's resident memory.
 *
 *   flood [OPS] [--kind K]  OPS operations (default 20000) behind a 2 s delay_set, of kind
 *                           K (default mix): copy (async HtoD of 32 KiB from pageable
 *                           memory, a new pattern each time), launch (fill_u32), memset,
 *                           event (records), hostfn (host functions), or mix (all in turn).
 *   flood --wait-value MB   a stream waits on a device word; MB MiB of pageable copies queue
 *                           behind it; then a memset on another stream writes the word.
 *   flood --wait-host MB    a host function on the stream blocks until this thread has
 *                           queued MB MiB of pageable copies behind it.
 * Both --wait modes must finish: work that waits on a later call of the client must never
 * wait for the server's bound on queued work (server/core/queue.c). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK (32u << 10) /* the largest copy that travels inside a request */
#define REGIONS 32        /* destination regions the copies cycle through */

static void CUDA_CB count_fn(void *arg)
{
    __atomic_add_fetch((unsigned *)arg, 1, __ATOMIC_RELAXED);
}

static int release_flag;

/* Blocks the stream until the main thread says it has queued everything. */
static void CUDA_CB gate_fn(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&release_flag, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static CUfunction f_delay, f_fill;

static void delay_on(CUstream s, CUdeviceptr flag, unsigned long long ms)
{
    unsigned v = 1;
    unsigned long long ns = ms * 1000000ull;
    void *args[] = {&flag, &v, &ns};
    CHECK(cuLaunchKernel(f_delay, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

/* Queues n pageable copies into the regions of dst, pattern seed base + i; returns the seed
 * of the last copy into each region in last[]. */
static void copies(CUstream s, CUdeviceptr dst, uint8_t *host, unsigned n, uint32_t base,
                   uint32_t *last)
{
    for (unsigned i = 0; i < n; i++) {
        t_fill_pattern(host, CHUNK, base + i);
        CHECK(cuMemcpyHtoDAsync(dst + (CUdeviceptr)(i % REGIONS) * CHUNK, host, CHUNK, s));
        last[i % REGIONS] = base + i;
    }
}

static void check_regions(CUdeviceptr dst, const uint32_t *last, unsigned n)
{
    uint8_t *back = malloc(CHUNK);
    REQUIRE(back, "out of memory");
    for (unsigned r = 0; r < REGIONS && r < n; r++) {
        CHECK(cuMemcpyDtoH(back, dst + (CUdeviceptr)r * CHUNK, CHUNK));
        size_t off = t_pattern_mismatch(back, CHUNK, last[r]);
        REQUIRE(off == SIZE_MAX, "region %u differs at byte %zu from copy %u", r, off, last[r]);
    }
    free(back);
}

static void wait_modes(int value, unsigned mb)
{
    CUstream s, other;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUdeviceptr dst, word;
    CHECK(cuMemAlloc(&dst, (size_t)REGIONS * CHUNK));
    CHECK(cuMemAlloc(&word, 4));
    CHECK(cuMemsetD32(word, 0, 1));
    /* A memset of device memory returns before it runs (on the legacy stream, which the
     * non-blocking `other` does not wait for): without this the later write of 1 could run
     * first, and the wait would never end (natively too; once in a few thousand runs). */
    CHECK(cuCtxSynchronize());
    uint8_t *host = malloc(CHUNK);
    REQUIRE(host, "out of memory");
    uint32_t last[REGIONS];
    unsigned n = mb * (1u << 20) / CHUNK;
    if (value)
        CHECK(cuStreamWaitValue32(s, word, 1, CU_STREAM_WAIT_VALUE_GEQ));
    else
        CHECK(cuLaunchHostFunc(s, gate_fn, NULL));
    copies(s, dst, host, n, 1000, last);
    if (value)
        CHECK(cuMemsetD32Async(word, 1, 1, other)); /* a later call releases the stream */
    else
        __atomic_store_n(&release_flag, 1, __ATOMIC_RELEASE);
    CHECK(cuStreamSynchronize(s));
    check_regions(dst, last, n);
    t_ok("%u MiB of copies behind a %s satisfied by a later call ran", mb,
         value ? "stream wait value" : "host function");
}

int main(int argc, char **argv)
{
    t_init("flood", 600);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_delay = t_get_function(mod, "delay_set");
    f_fill = t_get_function(mod, "fill_u32");
    unsigned ops = 20000;
    const char *kind = "mix";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--wait-value") && i + 1 < argc) {
            wait_modes(1, (unsigned)atoi(argv[++i]));
            t_pass();
        } else if (!strcmp(argv[i], "--wait-host") && i + 1 < argc) {
            wait_modes(0, (unsigned)atoi(argv[++i]));
            t_pass();
        } else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
            kind = argv[++i];
        } else {
            ops = (unsigned)strtoul(argv[i], NULL, 10);
        }
    }
    int all = !strcmp(kind, "mix");
    int want[5];
    const char *names[5] = {"copy", "launch", "memset", "event", "hostfn"};
    int nkinds = 0;
    for (int k = 0; k < 5; k++)
        if ((want[k] = all || !strcmp(kind, names[k]))) nkinds++;
    REQUIRE(nkinds, "unknown kind %s", kind);

    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr dst, fillbuf, setbuf, flag;
    CHECK(cuMemAlloc(&dst, (size_t)REGIONS * CHUNK));
    CHECK(cuMemAlloc(&fillbuf, 4096));
    CHECK(cuMemAlloc(&setbuf, 4096));
    CHECK(cuMemAlloc(&flag, 4));
    CUevent ev[4];
    for (int i = 0; i < 4; i++)
        CHECK(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
    uint8_t *host = malloc(CHUNK);
    REQUIRE(host, "out of memory");
    uint32_t last[REGIONS] = {0};
    unsigned ncopies = 0, nfns = 0, ran = 0;
    uint32_t fill_last = 0, set_last = 0;
    delay_on(s, flag, 2000);
    for (unsigned i = 0; i < ops; i++) {
        int k = (int)(i % 5); /* mix: every kind in turn */
        if (!all)
            for (k = 0; !want[k]; k++)
                ;
        switch (k) {
        case 0:
            t_fill_pattern(host, CHUNK, ncopies);
            CHECK(
                cuMemcpyHtoDAsync(dst + (CUdeviceptr)(ncopies % REGIONS) * CHUNK, host, CHUNK, s));
            last[ncopies % REGIONS] = ncopies;
            ncopies++;
            break;
        case 1: {
            unsigned long long n = 1024;
            fill_last = i;
            void *args[] = {&fillbuf, &fill_last, &n};
            CHECK(cuLaunchKernel(f_fill, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
            break;
        }
        case 2:
            set_last = i;
            CHECK(cuMemsetD32Async(setbuf, set_last, 1024, s));
            break;
        case 3:
            CHECK(cuEventRecord(ev[i % 4], s));
            break;
        case 4:
            CHECK(cuLaunchHostFunc(s, count_fn, &ran));
            nfns++;
            break;
        }
    }
    CHECK(cuStreamSynchronize(s));
    if (want[0]) check_regions(dst, last, ncopies);
    uint32_t got[1024];
    if (want[1]) {
        CHECK(cuMemcpyDtoH(got, fillbuf, sizeof(got)));
        for (int j = 0; j < 1024; j++)
            REQUIRE(got[j] == fill_last, "fill word %d is %u, want %u", j, got[j], fill_last);
    }
    if (want[2]) {
        CHECK(cuMemcpyDtoH(got, setbuf, sizeof(got)));
        for (int j = 0; j < 1024; j++)
            REQUIRE(got[j] == set_last, "memset word %d is %u, want %u", j, got[j], set_last);
    }
    for (int i = 0; i < 4; i++)
        CHECK(cuEventQuery(ev[i]));
    REQUIRE(__atomic_load_n(&ran, __ATOMIC_RELAXED) == nfns, "%u of %u host functions ran", ran,
            nfns);
    t_ok("%u operations of kind %s queued behind a long kernel all ran, in order", ops, kind);
    t_pass();
}
