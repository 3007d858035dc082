/* A client that speaks the wire protocol by hand, to test how the server treats bad input:
 *   rawclient version   hello with another protocol version: must be refused, naming both
 *   rawclient garbage   valid handshake, then malformed records: the server must drop this
 *                       client (and keep serving others)
 *   rawclient silent    connects and says nothing: the server must time the handshake out
 *   rawclient scribble  while its cuArrayCreate_v2 calls are answered, a second thread keeps
 *                       writing another client's array handle into its reply lane: the server
 *                       must register what the driver made, never what the lane says, so the
 *                       other client's array stays out of reach (cuArrayDestroy refused)
 *   rawclient trickle   sends its hello one byte a second: the server must hang up once the
 *                       handshake's time is out, not wait as long as bytes keep coming
 *   rawclient crowd N S holds N connections that never say hello for S seconds (the CI tier
 *                       checks meanwhile that real clients are still served)
 *   rawclient hostile   well-formed calls a hostile client makes, bypassing every check the
 *                       shim does: sizes and pitches whose spans wrap 64 bits, extents far
 *                       beyond its allocation, images whose headers wrap, __managed__
 *                       variable transfers naming memory that is not such a variable of its
 *                       own (another client's, device memory, past or wrapping the end, more
 *                       entries or bytes than the record holds), batched copies whose members,
 *                       attributes or staged bytes do not add up; each must be refused by the
 *                       server with an error, and the server must go on
 *   rawclient devices   given the server's device 1 alone, forges device 1 in contexts,
 *                       CUdevice parameters, CUmemLocation ids and peer copies: each must
 *                       be refused with CUDA_ERROR_INVALID_DEVICE, device 0 mapped to 1
 *   rawclient shrink    registers host memory (cuMemHostRegister's protocol: a descriptor on
 *                       the socket, then the record) backed by what a hostile client may
 *                       send: an unsealed memfd, a file, a memfd sealed against growing only
 *                       (each must be refused), and a memfd sealed against shrinking (taken);
 *                       with a stream wait on each one taken, it tries to shrink them to 0
 *                       (must fail), punches a hole in the sealed one (allowed) and leaves:
 *                       the server must survive its stores into those pages
 *                       (tests/hostreg_shrink.sh checks it does)
 *   rawclient accounts  one process, several connections (the server started with
 *                       MPSSHIM_MAX_PINNED_MB=4 and MPSSHIM_MAX_OBJECTS=300 by
 *                       tests/accounts.sh): a 4 MiB device memory limit, 4 MiB of pinned
 *                       memory and 300 records hold for the process, not for each
 *                       connection: 3 MiB in one connection, then 3 MiB more in another
 *                       must be refused, 1 MiB taken; likewise pinned memory; events
 *                       made across connections stop at the cap with
 *                       CUDA_ERROR_OUT_OF_MEMORY, and one destroyed makes room for one; a
 *                       ninth connection of the process is refused
 *   rawclient mirror H  (a GPU's server's client) asks a mirror of another process's memory
 *                       by its legacy IPC handle H (hex) made through a sibling GPU's server,
 *                       then the same forged: each must be refused (tests/unit/rawmirror.c)
 *   rawclient fuzz S N  N records of random operations and payloads (seed S), over as many
 *                       sessions as it takes (the server hangs up on protocol errors); the
 *                       server must survive (the CI tier then checks it still serves)
 * Exit 0 when the server behaved as it must. Uses $MPSSHIM_PIPE_DIRECTORY.
 * This file reads the command line; the modes are in tests/unit/raw*.c (rawclient.h says
 * which file holds which), on the session and request helpers of rawsession.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/rawclient.h"

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "devices") == 0) return raw_devices();
    if (argc == 3 && strcmp(argv[1], "mirror") == 0) return raw_mirror(argv[2]);
    if (argc == 4 && strcmp(argv[1], "fuzz") == 0)
        return raw_fuzz(strtoull(argv[2], NULL, 10), atol(argv[3]));
    if (argc == 2 && strcmp(argv[1], "version") == 0) return raw_version();
    if (argc == 2 && strcmp(argv[1], "garbage") == 0) return raw_garbage();
    if (argc == 2 && strcmp(argv[1], "silent") == 0) return raw_silent();
    if (argc == 2 && strcmp(argv[1], "hostile") == 0) return raw_hostile();
    if (argc == 2 && strcmp(argv[1], "scribble") == 0) return raw_scribble();
    if (argc == 2 && strcmp(argv[1], "payloads") == 0) return raw_payloads();
    if (argc == 2 && strcmp(argv[1], "trickle") == 0) return raw_trickle();
    if (argc == 2 && strcmp(argv[1], "accounts") == 0) return raw_accounts();
    if (argc == 2 && strcmp(argv[1], "shrink") == 0) return raw_shrink();
    if (argc == 4 && strcmp(argv[1], "crowd") == 0) return raw_crowd(atoi(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: rawclient "
                    "devices|version|garbage|silent|hostile|scribble|payloads|trickle|shrink|crowd "
                    "N SECS|fuzz SEED N\n");
    return 2;
}
