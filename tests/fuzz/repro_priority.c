/* Reproducer of a finding of fuzz_server (issue 34, item 9): a stream priority from the
 * client overflows the server's arithmetic.
 *
 * srv_policy_stream_priority (server/limits/policy.c) computes requested - 2 (- 1) in int before
 * clamping to the device's range; a client that asks for priority INT_MIN (cuStreamCreate-
 * WithPriority's argument, sent as is in chan_stream_create) makes that a signed overflow:
 * undefined behaviour, and under UBSan (tests/asan.sh's server, -fno-sanitize-recover) the
 * server dies: "policy.c:255:23: runtime error: signed integer overflow: -2147483648 - 2".
 * Expected: the priority is clamped without overflow (the stream is made, the server goes on).
 *
 * Usage (a server running on $MPSSHIM_PIPE_DIRECTORY: tests/fuzz/repro.sh starts one; give it
 * SERVER=BUILD-asan/mpsshim-server to see the overflow):
 *   repro_priority KERNELS_DIR [control]
 * exit 0: the server answered after the stream was asked for; 1: it did not. `control`:
 * priority -1. */
#include "tests/fuzz/repro_client.h"

#include <limits.h>

int main(int argc, char **argv)
{
    int control = argc == 3 && !strcmp(argv[2], "control");
    if (argc != 2 && !control) {
        fprintf(stderr, "usage: repro_priority KERNELS_DIR [control]\n");
        return 2;
    }
    struct session a;
    open_client_a(&a);
    struct chan_stream_create m = {.flags = 0, .priority = control ? -1 : INT_MIN};
    uint64_t s = 0;
    long r = request(&a, CHAN_OP_STREAM_CREATE, &m, sizeof(m), 10, &s, sizeof(s));
    long after = request(&a, CHAN_OP_ERROR_STRING, &(int32_t){0}, sizeof(int32_t), 10, NULL, 0);
    printf("stream of priority %d: %s; then the server %s\n", m.priority,
           r < 0 ? "no answer" : shim_error_name((CUresult)r),
           after < 0 ? "did not answer (it died?)" : "answered");
    if (r < 0 || after < 0) {
        printf("FAIL\n");
        return 1;
    }
    printf("PASS\n");
    return 0;
}
