/* Reproducer of a finding of fuzz_server (issue 34, item 9): a client whose host functions'
 * sequence numbers are out of cyclic order leaves streams that its release cannot let go.
 *
 * The server enqueues, for the n-th host function, a wait until done[n % CHAN_CB_SLOTS] >= n
 * (cyclic GEQ) on the client's segment; when the client leaves, srv_hostfn_release stores
 * cb_last, the sequence number of the LAST host function enqueued, into every done word.
 * The shim numbers them 1, 2, 3...; a hostile client need not: after host functions 2^30 and
 * then 1, the first one's wait needs done >= 2^30 and gets 1, for ever.
 *
 * What happens then (the CPU test driver behind the server; MPSSHIM_RELEASE_TIMEOUT=3):
 *  - the release of client A gives up after the timeout ("its work was still running"): what
 *    it held stays allocated and its state is never freed (left_running);
 *  - its wait stays pending in the code gate (codegate.c), so every later module load on the
 *    device, by ANY client, waits at the gate until its own client leaves: client B's
 *    cuModuleLoadData never answers.
 * Expected: A's release lets every wait of A go (B's load answers at once).
 *
 * Usage (a server running on $MPSSHIM_PIPE_DIRECTORY: tests/fuzz/repro.sh starts one):
 *   repro_hostfn_seq KERNELS_DIR [control]
 * exit 0: B's load was answered; 1: it was not (the bug). `control`: A's host functions are
 * numbered 1 and 2, as the shim numbers them (B's load is answered). */
#include "tests/fuzz/repro_client.h"

int main(int argc, char **argv)
{
    int control = argc == 3 && !strcmp(argv[2], "control");
    if (argc != 2 && !control) {
        fprintf(stderr, "usage: repro_hostfn_seq KERNELS_DIR [control]\n");
        return 2;
    }
    struct session a;
    open_client_a(&a);
    /* Client A: two host functions on its NULL stream; it never runs them, and leaves. */
    struct chan_host_func h1 = {.stream = 0, .seq = control ? 1 : 1u << 30},
                          h2 = {.stream = 0, .seq = control ? 2 : 1};
    put(&a, CHAN_OP_HOST_FUNC, 0, &h1, sizeof(h1));
    put(&a, CHAN_OP_HOST_FUNC, 0, &h2, sizeof(h2));
    /* A synchronous call, so that both are enqueued before it goes. */
    request(&a, CHAN_OP_ERROR_STRING, &(int32_t){0}, sizeof(int32_t), 10, NULL, 0);
    close(a.sock);
    printf("client A sent host functions %u and %u and left\n", h1.seq, h2.seq);
    sleep(1);
    return load_answered(argv[1]);
}
