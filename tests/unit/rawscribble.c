/* The raw client's scribble mode (tests/unit/rawclient.c): another thread writes another
 * client's array handle into the reply lane while the server answers cuArrayCreate_v2; the
 * server must register what the driver made, never what the lane says. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/rawclient.h"

static _Atomic int scribbling;
struct scribble_arg {
    volatile uint8_t *lane;
    uint64_t value;
};

static void *scribbler(void *p)
{
    struct scribble_arg *a = p;
    while (atomic_load(&scribbling))
        for (int i = 0; i < 8; i++)
            memcpy((uint8_t *)a->lane + i * 8, &a->value, 8);
    return NULL;
}

int raw_scribble(void)
{
    struct raw_session victim, thief;
    if (raw_session_open(&victim) != 0 || raw_session_open(&thief) != 0) return 1;
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (raw_request(&victim, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS ||
        raw_request(&thief, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS)
        return 1;
    CUDA_ARRAY_DESCRIPTOR desc = {
        .Width = 64, .Height = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CUarray theirs = NULL, mine = NULL, *pa = &theirs;
    const CUDA_ARRAY_DESCRIPTOR *pd = &desc;
    const void *ca[] = {&pa, &pd};
    if (raw_call(&victim, SHIM_ID_cuArrayCreate_v2, ca, &theirs, sizeof(theirs)) != CUDA_SUCCESS ||
        !theirs) {
        fprintf(stderr, "the victim has no array\n");
        return 1;
    }
    struct scribble_arg arg = {.lane = thief.c.lanes[0].data, .value = (uint64_t)(uintptr_t)theirs};
    pthread_t t;
    atomic_store(&scribbling, 1);
    pthread_create(&t, NULL, scribbler, &arg);
    int stolen = 0, made = 0;
    for (int i = 0; i < 500 && !stolen; i++) {
        pa = &mine;
        CUresult r = raw_call(&thief, SHIM_ID_cuArrayCreate_v2, ca, NULL, 0);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "the thief's cuArrayCreate_v2 failed: %d\n", (int)r);
            break;
        }
        made++;
        const void *da[] = {&theirs};
        stolen = raw_call(&thief, SHIM_ID_cuArrayDestroy, da, NULL, 0) == CUDA_SUCCESS;
    }
    printf("%d arrays made under a scribbled lane\n", made);
    atomic_store(&scribbling, 0);
    pthread_join(t, NULL);
    const void *da[] = {&theirs};
    CUresult still = raw_call(&victim, SHIM_ID_cuArrayDestroy, da, NULL, 0);
    printf("the other client's array %s; it destroys it itself: %s\n",
           stolen ? "was destroyed by the thief" : "stayed out of reach",
           still == CUDA_SUCCESS ? "ok" : "FAILED");
    return !stolen && made == 500 && still == CUDA_SUCCESS ? 0 : 1;
}
