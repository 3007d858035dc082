/* poolrace MODE THREADS SECONDS: THREADS threads of one process, each in a loop for SECONDS
 * s: create a memory pool, allocate 1 MiB from it on a stream of its own, set it, then, by
 * MODE:
 *   0  destroy the pool, then cuMemFree the allocation
 *   1  destroy the pool, then cuMemFreeAsync it and synchronise
 *   2  cuMemFree it, allocate and cuMemFreeAsync again, synchronise, destroy the pool
 *   3  cuMemFree it, then destroy the pool
 *   4  cuMemFreeAsync it, destroy the pool with the free still queued, synchronise
 *   9  each round one of 0-4 at random
 * Prints the rounds done and PASS. Natively it shows what the driver allows many threads
 * of one process to do with pools, which is what the server does with many clients' pool
 * calls: on an H100 (driver 580.159.04) modes 0, 1 and 9 killed the process within 10 s
 * with 8 threads, 2, 3 and 4 ran clean (server/memory/pools.c). Through the shim, one thread per
 * client and several clients, it shows that the server survives them. Not in
 * programs.txt: a native run may die by design. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static CUcontext g_ctx;
static int g_mode;
static double g_secs;

static void round_of(int mode, CUstream s)
{
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool pool;
    CUdeviceptr p = 0, q = 0;
    CHECK(cuMemPoolCreate(&pool, &props));
    CHECK(cuMemAllocFromPoolAsync(&p, 1 << 20, pool, s));
    CHECK(cuMemsetD8Async(p, 1, 1 << 20, s));
    CHECK(cuStreamSynchronize(s));
    switch (mode) {
    case 0:
        CHECK(cuMemPoolDestroy(pool));
        CHECK(cuMemFree(p));
        break;
    case 1:
        CHECK(cuMemPoolDestroy(pool));
        CHECK(cuMemFreeAsync(p, s));
        CHECK(cuStreamSynchronize(s));
        break;
    case 2:
        CHECK(cuMemFree(p));
        CHECK(cuMemAllocFromPoolAsync(&q, 1 << 20, pool, s));
        CHECK(cuMemFreeAsync(q, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemPoolDestroy(pool));
        break;
    case 3:
        CHECK(cuMemFree(p));
        CHECK(cuMemPoolDestroy(pool));
        break;
    default:
        CHECK(cuMemFreeAsync(p, s));
        CHECK(cuMemPoolDestroy(pool));
        CHECK(cuStreamSynchronize(s));
        break;
    }
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(g_ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    long n = 0;
    for (double end = t_now_s() + g_secs; t_now_s() < end; n++)
        round_of(g_mode == 9 ? (int)(rand_r(&seed) % 5) : g_mode, s);
    CHECK(cuStreamDestroy(s));
    return (void *)n;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: poolrace MODE THREADS SECONDS\n");
        return 2;
    }
    g_mode = atoi(argv[1]);
    int threads = atoi(argv[2]);
    g_secs = atof(argv[3]);
    if (threads < 1 || threads > 64 || g_secs <= 0 || g_mode < 0 || (g_mode > 4 && g_mode != 9)) {
        fprintf(stderr, "poolrace: MODE 0-4 or 9, THREADS 1-64, SECONDS > 0\n");
        return 2;
    }
    t_init("poolrace", (unsigned)g_secs + 60);
    CUdevice dev;
    t_setup(&dev, &g_ctx);
    pthread_t th[64];
    for (int i = 0; i < threads; i++)
        REQUIRE(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0,
                "pthread_create failed");
    long total = 0;
    for (int i = 0; i < threads; i++) {
        void *n;
        pthread_join(th[i], &n);
        total += (long)n;
    }
    t_ok("mode %d, %d threads: %s", g_mode, threads, total > 0 ? "rounds done" : "no round");
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
