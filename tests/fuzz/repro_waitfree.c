/* Reproducer of a finding of fuzz_server (issue 34, item 9): a stream wait on device memory
 * that the client frees before the wait ends is never ended, and holds every client's code
 * loads for good.
 *
 * A wait blocks its stream until the client's word holds a value; when the client leaves,
 * srv_memops_unblock writes a satisfying value into each waited word "only into memory that
 * is still the client's". Two ways to free the word first (client A, CPU test driver,
 * MPSSHIM_RELEASE_TIMEOUT=3):
 *  - ctx: A allocates the word in its context 1, waits on it (word >= 0, cyclic, with the
 *    word's top bit set) on the NULL stream of its context 2, then destroys context 1: the
 *    destruction drains context 1's streams only and frees the word; when A leaves, its
 *    release skips the wait (the word is no longer A's) and gives up after the timeout;
 *  - free: the same wait on its one context, then cuMemFree of the word, and A is killed
 *    while the free waits for A's streams (as cuMemFree waits natively): its worker stays in
 *    that wait for good (the main loop lets go only of waits on host memory), so A is never
 *    released at all.
 * Either way the wait stays pending in the code gate (codegate.c): every later module load
 * on the device, by ANY client, waits at the gate until its own client leaves (client B's
 * load gets no answer). Natively the process's own context goes with it, and its waits.
 * Expected: no wait of A outlives A (B's load answers at once).
 *
 * Usage (a server running on $MPSSHIM_PIPE_DIRECTORY: tests/fuzz/repro.sh starts one):
 *   repro_waitfree KERNELS_DIR ctx|free [control]
 * exit 0: B's load was answered; 1: it was not (the bug). `control`: the word holds 0, so
 * the wait passes at once (B's load is answered). */
#include "tests/fuzz/repro_client.h"

int main(int argc, char **argv)
{
    int control = argc == 4 && !strcmp(argv[3], "control");
    if ((argc != 3 && !control) || (strcmp(argv[2], "ctx") && strcmp(argv[2], "free"))) {
        fprintf(stderr, "usage: repro_waitfree KERNELS_DIR ctx|free [control]\n");
        return 2;
    }
    int by_ctx = !strcmp(argv[2], "ctx");
    struct session a;
    open_client_a(&a);
    CUdeviceptr d = alloc_client_a(&a, 4096);
    struct chan_ctx c2 = {.id = 2, .device = 0, .primary = 0};
    if (by_ctx && request(&a, CHAN_OP_CTX_CREATE, &c2, sizeof(c2), 10, NULL, 0) != 0) {
        fprintf(stderr, "client A has no second context\n");
        return 2;
    }
    /* The word's top bit set (as any value of its may be), then a wait for word >= 0. */
    CUstream st = NULL;
    cuuint32_t top = control ? 0 : 0x80000000u, zero = 0;
    unsigned wr = 0, geq = CU_STREAM_WAIT_VALUE_GEQ;
    const void *w1[] = {&st, &d, &top, &wr}, *w2[] = {&st, &d, &zero, &geq};
    repro_ctx = by_ctx ? 2 : 1;
    call(&a, SHIM_ID_cuStreamWriteValue32_v2, w1, 0, NULL, 0);
    call(&a, SHIM_ID_cuStreamWaitValue32_v2, w2, 0, NULL, 0);
    request(&a, CHAN_OP_ERROR_STRING, &(int32_t){0}, sizeof(int32_t), 10, NULL, 0);
    repro_ctx = 1;
    if (by_ctx) {
        struct chan_ctx c1 = {.id = 1};
        long r = request(&a, CHAN_OP_CTX_DESTROY, &c1, sizeof(c1), 10, NULL, 0);
        printf("client A waited in context 2 on its word of context 1, destroyed context 1 "
               "(%s) and left\n",
               r < 0 ? "no answer" : shim_error_name((CUresult)r));
    } else {
        const void *fa[] = {&d};
        call(&a, SHIM_ID_cuMemFree_v2, fa, 0, NULL, 0);
        sleep(1);
        printf("client A waited on its word, freed it and was killed during the free\n");
    }
    close(a.sock);
    sleep(1);
    return load_answered(argv[1]);
}
