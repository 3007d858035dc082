/* Reproducer of a finding of fuzz_server (issue 34, item 9): two stream waits on one word of
 * a client's device memory, for different values, outlive the client's release.
 *
 * The server remembers, per address, only the LATEST wait a client enqueued (memops.c,
 * wait_after), and when the client leaves it writes that wait's value into the word. A
 * client that waits on its NULL stream for word == 5, then (after it) for word == 7, and
 * leaves: the release writes 7, the first wait never sees 5, and the stream never moves.
 * Natively such a program would block too, but only itself; here:
 *  - the release of client A gives up after MPSSHIM_RELEASE_TIMEOUT ("its work was still
 *    running"): what it held stays allocated (left_running);
 *  - its first wait stays pending in the code gate (codegate.c), so every later module load
 *    on the device, by ANY client, waits at the gate until its own client leaves.
 * Expected: A's release lets every wait of A go (B's load answers at once). The same holds
 * for two waits on one word from two streams, and for GEQ waits (GEQ 10, then GEQ 5).
 *
 * Usage (a server running on $MPSSHIM_PIPE_DIRECTORY: tests/fuzz/repro.sh starts one):
 *   repro_waitvalue KERNELS_DIR [control]
 * exit 0: B's load was answered; 1: it was not (the bug). `control`: both waits are for 5
 * (B's load is answered). */
#include "tests/fuzz/repro_client.h"

int main(int argc, char **argv)
{
    int control = argc == 3 && !strcmp(argv[2], "control");
    if (argc != 2 && !control) {
        fprintf(stderr, "usage: repro_waitvalue KERNELS_DIR [control]\n");
        return 2;
    }
    struct session a;
    open_client_a(&a);
    CUdeviceptr d = alloc_client_a(&a, 4096);
    CUstream st = NULL;
    cuuint32_t v1 = 5, v2 = control ? 5 : 7;
    unsigned eq = CU_STREAM_WAIT_VALUE_EQ;
    const void *w1[] = {&st, &d, &v1, &eq}, *w2[] = {&st, &d, &v2, &eq};
    call(&a, SHIM_ID_cuStreamWaitValue32_v2, w1, 0, NULL, 0);
    call(&a, SHIM_ID_cuStreamWaitValue32_v2, w2, 0, NULL, 0);
    request(&a, CHAN_OP_ERROR_STRING, &(int32_t){0}, sizeof(int32_t), 10, NULL, 0);
    close(a.sock);
    printf("client A waited for its word == %u, then == %u, and left\n", v1, v2);
    sleep(1);
    return load_answered(argv[1]);
}
