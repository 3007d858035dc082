/* The raw client's hostile mode, its synchronisations never waited for (server/core/waits.h,
 * SRV_WAITS_MAX): on a stream held by a wait on a value nobody writes yet, three times as
 * many synchronisations as a client may have pending are sent, each asking a reply on a
 * lane that already waits for one, and none waited for. The server must keep at most its
 * bound of them (a synchronisation on lane 0 past them is answered CUDA_ERROR_OUT_OF_MEMORY
 * rather than held), and once the value is written it must serve the stream's
 * synchronisations again. A second thread of the process stands by meanwhile: with one thread
 * only, the worker may block in the driver for a synchronisation (waits.c may_block), which
 * is this client's own stall, not the bound under test. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/core/waits.h"
#include "tests/unit/rawclient.h"

static _Atomic int stand_down;

static void *stand_by(void *arg)
{
    (void)arg;
    while (!atomic_load(&stand_down))
        usleep(1000);
    return NULL;
}

/* A synchronisation of stream st asking its reply on `lane`, not waited for. */
static int sync_unwaited(struct raw_session *x, uint64_t st, uint16_t lane)
{
    struct chan_wait wt = {.spin_ns = 1000, .alive = raw_before_deadline};
    raw_give_up_at = chan_now_ns() + 10000000000ull;
    struct chan_rec *r = chan_ring_reserve(&x->c, (uint32_t)(sizeof(*r) + sizeof(st)), &wt);
    if (!r) return -1;
    r->op = CHAN_OP_STREAM_SYNC;
    r->flags = CHAN_RF_REPLY;
    r->lane = lane;
    r->thread = 1;
    r->ctx = 1;
    memcpy(r + 1, &st, sizeof(st));
    chan_ring_publish(&x->c, r);
    return 0;
}

void raw_hostile_waits(struct raw_session *x, CUdeviceptr d)
{
    pthread_t th;
    if (pthread_create(&th, NULL, stand_by, NULL) != 0) {
        printf("no second thread\n");
        raw_failures++;
        return;
    }
    struct chan_stream_create sc = {.flags = CU_STREAM_NON_BLOCKING};
    uint64_t st = 0;
    CUresult r = raw_request(x, CHAN_OP_STREAM_CREATE, &sc, sizeof(sc), &st, sizeof(st));
    unsigned zero = 0, one = 1, eq = CU_STREAM_WAIT_VALUE_EQ;
    size_t n1 = 1;
    if (r == CUDA_SUCCESS) {
        const void *a[] = {&d, &zero, &n1};
        r = raw_call(x, SHIM_ID_cuMemsetD32_v2, a, NULL, 0);
    }
    if (r == CUDA_SUCCESS) {
        CUstream s = (CUstream)(uintptr_t)st;
        const void *a[] = {&s, &d, &one, &eq};
        r = raw_call(x, SHIM_ID_cuStreamWaitValue32_v2, a, NULL, 0);
    }
    printf("%-58s %s\n", "a stream held by a wait on a value", r == CUDA_SUCCESS ? "ok" : "FAILED");
    raw_failures += r != CUDA_SUCCESS;
    int sent = 0;
    for (int i = 0; r == CUDA_SUCCESS && i < 3 * SRV_WAITS_MAX; i++)
        sent += sync_unwaited(x, st, (uint16_t)(1 + i % (CHAN_NLANES - 1))) == 0;
    printf("%-58s %d\n", "  synchronisations of it sent, none waited for", sent);
    raw_failures += sent != 3 * SRV_WAITS_MAX;
    raw_expect("  then one more, waited for",
               raw_request(x, CHAN_OP_STREAM_SYNC, &st, sizeof(st), NULL, 0),
               CUDA_ERROR_OUT_OF_MEMORY);
    /* The value written from the legacy stream (the held one does not block it): the held
     * stream runs on, and its synchronisations end, answered or taken back. */
    const void *a[] = {&d, &one, &n1};
    raw_expect("then the value written", raw_call(x, SHIM_ID_cuMemsetD32_v2, a, NULL, 0),
               CUDA_SUCCESS);
    uint64_t until = chan_now_ns() + 20000000000ull;
    do {
        r = raw_request(x, CHAN_OP_STREAM_SYNC, &st, sizeof(st), NULL, 0);
    } while (r == CUDA_ERROR_OUT_OF_MEMORY && chan_now_ns() < until && usleep(1000) == 0);
    raw_expect("  then its synchronisation", r, CUDA_SUCCESS);
    atomic_store(&stand_down, 1);
    pthread_join(th, NULL);
}
