#!/usr/bin/env bash
# Fault containment (CI tier, on the server of MPSSHIM_PIPE_DIRECTORY, CPU test driver):
# three clients loop vec_add on device 0, a fourth waits inside a synchronisation on a long
# kernel (its worker is stuck in the driver), a fifth does the same from a process of two
# threads (its wait is polled: the fault ends it), a sixth loops on device 1; then a client
# launches vec_add through a wild pointer. Each device-0 client must see a sticky error and
# leave cleanly, the device-1 one must not notice, get_server_status must say FAULT and then
# ACTIVE, the context must be made again within a second although one worker never let go
# in time, a new client must pass vecadd, and the tables and memory must end as they began.
# With `gpu` (the GPU tier, tests/gpu.sh: its server on the real driver) the same, except
# what only the CPU test driver makes observable: on a GPU the fault ends the long kernel at
# once, so the FAULT status may last a few milliseconds (the log must show it instead), a
# second device may be missing (that client skips), and the driver's own memory after a
# new context is reported, not compared.
# usage: fault.sh BUILD_DIR WORK_DIR [gpu]
set -u
B=$(cd "$1" && pwd)
W=$2/fault
GPU=${3:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
[ -n "$GPU" ] && unset MPSSHIM_DRIVER MPSSHIM_CPUDRV_DEVICES # lib.sh's are the CPU driver's
mkdir -p "$W"
log=$MPSSHIM_LOG_DIRECTORY/server.log
fail() { echo "FAIL: $*"; exit 1; }

wait_for 10 no_clients || fail "clients of earlier tests still there"
base=$(mem_used)
pids=""
for i in 1 2 3; do
    env LD_PRELOAD="$SHIM" "$B/tests/fault" --bystander 60 >"$W/bystander$i.log" 2>&1 &
    pids="$pids $!"
done
env LD_PRELOAD="$SHIM" "$B/tests/fault" --stuck 20 >"$W/stuck.log" 2>&1 &
pids="$pids $!"
env LD_PRELOAD="$SHIM" "$B/tests/fault" --waiter 20 >"$W/waiter.log" 2>&1 &
waiter=$!
pids="$pids $waiter"
env LD_PRELOAD="$SHIM" "$B/tests/fault" --other 3 >"$W/other.log" 2>&1 &
other=$!
for f in bystander1 bystander2 bystander3 stuck waiter other; do
    wait_for 10 grep -q ready "$W/$f.log" || { cat "$W/$f.log"; fail "$f never got ready"; }
done
# The FAULT status lasts while the stuck client's worker holds out (400 ms at most).
(for _ in $(seq 400); do ctl get_server_status | grep "^Status"; sleep 0.01; done) >"$W/status.log" &
poller=$!
shim "$B/tests/fault" >"$W/faulter.log" 2>&1 || { cat "$W/faulter.log"; fail "the faulting client"; }
# A client that comes right after is served on the fresh context.
shim "$B/tests/vecadd" 1000 >"$W/newclient.log" 2>&1 || { cat "$W/newclient.log"; fail "a new client"; }
rc=0
for p in $pids; do wait "$p" || rc=1; done
wait "$other"
orc=$?
[ $orc = 0 ] || [ $orc = 77 ] || rc=1
kill "$poller" 2>/dev/null
wait "$poller" 2>/dev/null
tail -n 3 "$W"/*.log
[ $rc = 0 ] || fail "a bystander"
echo "statuses seen: $(uniq "$W/status.log" | cut -d' ' -f2 | tr '\n' ' ')"
[ -n "$GPU" ] || grep -q "^Status FAULT" "$W/status.log" || fail "get_server_status never said FAULT"
grep -q "Device 0: .* in the shared context" "$log" || fail "the server did not see the fault"
ctl get_server_status | grep -q "^Status ACTIVE$" || fail "not ACTIVE afterwards"
grep "Device 0: .* in the shared context\|made again\|did not let go\|Client process $waiter: its" "$log" | tail -n 4
[ -n "$GPU" ] || grep -q "Client process $waiter: .* 1 wait ended with the error" "$log" ||
    fail "the polled wait was not ended by the fault"
grep -q "Device 1: .* in the shared context" "$log" && fail "device 1 faulted too"
ms=$(grep -o "Device 0: shared context made again [0-9]* ms" "$log" | tail -n 1 | awk '{print $7}')
[ -n "$ms" ] && [ "$ms" -lt 1000 ] || fail "context made again after ${ms:-never} ms"
wait_for 10 no_clients || fail "clients not released"
st=$(ctl get_server_status)
echo "$st"
used=$(echo "$st" | awk '/^Device 0 memory used/ {print $5}')
if [ -n "$GPU" ]; then
    echo "device 0 memory used $used bytes, $base before the fault (a new context)"
else
    [ "$used" = "$base" ] || fail "device 0 memory used $used, $base before"
fi
! grep -q "tables not empty\|objects left\|counters not zero" "$log" || fail "tables not empty"
echo "all checks passed"
