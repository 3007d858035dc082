#!/usr/bin/env bash
# Limits and counts are a client process's, not a connection's (issue 34: S5, S6, S9;
# server/limits/account.c). Own server, with a 4 MiB pinned memory cap and 300 records a process:
#  - rawclient accounts: one process with three connections under a 4 MiB device memory
#    limit, the pinned cap and the record cap: each holds for the three together; a ninth
#    connection of the process is refused;
#  - acct_limits ctxlimit: under a 1 MiB limit, context limits that cost device memory (a
#    stack, a heap) are refused past it and counted within it;
#  - acct_limits ipc: what a client opens through IPC counts against its limit, also once the
#    exporter freed it.
# The server must then hold nothing of them.
#   tests/accounts.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
real_driver_if_gpu
own_dir "$2/accounts"
unset MPSSHIM_PINNED_DEVICE_MEM_LIMIT CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
MPSSHIM_MAX_PINNED_MB=4 MPSSHIM_MAX_OBJECTS=300 "$CTL" -d || exit 1
"$B/tests/unit/rawclient" accounts || fail "rawclient accounts"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1M shim "$B/tests/acct_limits" ctxlimit || fail "acct_limits ctxlimit"
shim "$B/tests/acct_limits" ipc || fail "acct_limits ipc"
wait_for 30 no_clients || fail "clients were not released"
objs=$(server_objects)
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
grep -q "its account's counters were not zero" "$MPSSHIM_LOG_DIRECTORY/server.log" &&
    fail "an account's counters were not zero when it went: $(grep "account's counters" "$MPSSHIM_LOG_DIRECTORY/server.log" | head -1)"
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS limits and counts hold for a process across its connections"
exit $rc
