#!/usr/bin/env bash
# A client killed while a stream of its waits on the client itself (its own host function,
# or a value in its own pinned host memory), and while the server's thread for it is inside
# a long driver call, must not hold up the other clients until that call ends. On a GPU a
# call that waits for the whole device (cuMemFree, cuMemHostUnregister) holds the driver's
# lock meanwhile; the killed client's thread, in a call of its own that needs the lock, never
# got to its release, whose first step ends those waits, and every client stopped (an H200
# soak, with host functions). The server's main loop now ends them as soon as it sees the
# client gone. Here: the CPU test driver's frees wait for the whole context
# (MPSSHIM_CPUDRV_FREE_WAITS=1) and its 1 MiB allocations take 12 s
# (MPSSHIM_CPUDRV_SLOW_ALLOC: longer than the bystander's 8 s, so that it could not finish
# without the let-go), and cuMemAlloc is the driver's (MPSSHIM_DEVICE_VMM=0: the arena's
# frees wait for no one's work); two tests/hostfn_stuck clients, one waiting on a host
# function, one (--value) on a value, are killed in such an allocation, and a vecadd client,
# which frees memory, must finish in 8 s (it takes well under a second).
#   tests/hostfn_death.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/hostfn-death"
MPSSHIM_DEVICE_VMM=0 MPSSHIM_CPUDRV_SLOW_ALLOC=12 MPSSHIM_CPUDRV_FREE_WAITS=1 "$CTL" -d || exit 1
env LD_PRELOAD="$SHIM" "$B/tests/hostfn_stuck" >"$W/stuck.out" 2>&1 &
P=$!
env LD_PRELOAD="$SHIM" "$B/tests/hostfn_stuck" --value >"$W/stuck-value.out" 2>&1 &
V=$!
ready() { grep -q ready "$W/stuck.out" && grep -q ready "$W/stuck-value.out"; }
wait_for 20 ready || fail "hostfn_stuck did not get ready: $(tail -2 "$W"/stuck*.out)"
sleep 1 # their server threads are in the 12-s allocation now
kill -9 "$P" "$V"
wait "$P" "$V" 2>/dev/null
t0=$(date +%s%N)
if timeout 8 env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 300000 >"$W/vecadd.out" 2>&1; then
    echo "a client that frees memory finished $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kills"
else
    fail "a client that frees memory was held up by the killed ones ($(tail -1 "$W/vecadd.out"))"
fi
grep -q "Client process $P: its streams' waits on its host functions were let go before" \
    "$MPSSHIM_LOG_DIRECTORY/server.log" || fail "the log does not say the host-function waits were let go early"
grep -q "Client process $V: its streams' waits on values in its host memory were let go before" \
    "$MPSSHIM_LOG_DIRECTORY/server.log" || fail "the log does not say the value waits were let go early"
# The killed clients are released once their allocations return; the server then holds nothing.
wait_for 60 no_clients || fail "the killed clients were not released"
objs=$(server_objects)
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS killed clients' waits on their host functions and host memory let go at once"
exit $rc
