#!/usr/bin/env bash
# A reply the GPU would have posted fails (server/core/waits.c gpu_reply, srv_wait_fail): the
# shared context dies between the reply's store and the event behind it, so that the worker
# answers the thread with the fault at once. The fault must be the server's to know before
# the thread goes on: its next call (a cuMemAlloc, which the server's arena would serve with
# no driver call) must answer the fault too. Once, in CI, a client's cuMemAlloc succeeded in
# a dead context so. The CPU test driver dies at that very point on request
# (MPSSHIM_CPUDRV_FAULT_AFTER_STORE=N: the Nth event recorded right behind a store, counted
# from a server's start, which a bystander's rounds of copies, a launch and synchronisations
# reach within a second); each server that takes over after a fault inherits the request.
# ROUNDS rounds, each a bystander that must see its round fail with the fault and then the
# fault sticky, the faulted server gone after it. Without the fault noted first, two runs on
# the CPU machine failed 3 and 2 of their 8 rounds so. Own server.
#   tests/fault_reply.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
rc=0
ROUNDS=8
export MPSSHIM_CPUDRV_FAULT_AFTER_STORE=300
own_server "$2/fault-reply"
unset MPSSHIM_CPUDRV_FAULT_AFTER_STORE
for i in $(seq "$ROUNDS"); do
    S=$(server_pid)
    out=$(shim "$B/tests/fault" --bystander 60 2>&1)
    echo "round $i, server $S:"
    echo "$out"
    grep -q '^ok a round failed with CUDA_ERROR_ILLEGAL_ADDRESS' <<<"$out" ||
        fail "round $i: the bystander's round did not fail with the fault"
    grep -q '^ok the error is sticky' <<<"$out" || fail "round $i: its next call did not answer the fault"
    wait_for 30 gone "$S" || fail "round $i: the faulted server $S did not exit after its last client"
done
n=$(grep -c 'CUDA_ERROR_ILLEGAL_ADDRESS in the shared context; it is dead for its 1 client' "$W/log/server.log")
[ "$n" -ge "$ROUNDS" ] || fail "the servers raised $n faults on device 0 for $ROUNDS rounds"
stop_server 20 || fail "the last successor did not quit"
[ "$rc" = 0 ] && echo "PASS fault_reply: $ROUNDS failed replies from the GPU, each fault known before its thread went on"
exit "$rc"
