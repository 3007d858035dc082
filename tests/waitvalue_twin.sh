#!/usr/bin/env bash
# A client killed while a stream of its waits for a value in its own DEVICE memory, while
# other clients' calls wait for the whole device (for that very stream), must not stop them
# all for good (issue 11's twin of tests/hostfn_death.sh). On an H200 (580.159.04), while a
# thread's cuMemFree, cuMemHostUnregister or cuMemFreeHost waited for every stream of the
# context, the blocked one too, cuStreamCreate in any other thread waited for it: the
# release, which made a stream to write the value that ends the wait, waited for those
# calls, which waited for the release. A write on a stream made before went through: the
# server makes its release streams at start (server/control/main.c, memops.c).
# Here three tests/whole_wait clients set up (their code loaded, since a module load blocked
# so holds up even that write), then tests/waitvalue_exit --hold waits on its device memory,
# then they make their calls: the driver's cuMemFree (MPSSHIM_DEVICE_VMM=0),
# cuMemHostUnregister and cuMemFreeHost. On the CPU test driver the three wait for the
# whole context (MPSSHIM_CPUDRV_FREE_WAITS=1), and stream creation waits meanwhile
# (MPSSHIM_CPUDRV_CREATE_WAITS=1), as the H200's did; on a GPU the real driver stands behind
# the server. The free must be held up while the client waits (else nothing is tested), and
# every call must end once it is killed; the killed client is released and the server holds
# nothing of it.
#   tests/waitvalue_twin.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
real_driver_if_gpu
own_dir "$2/waitvalue-twin"
rm -f "$W/go"
MPSSHIM_DEVICE_VMM=0 MPSSHIM_CPUDRV_FREE_WAITS=1 MPSSHIM_CPUDRV_CREATE_WAITS=1 "$CTL" -d || exit 1
S=$(server_pid)
pids=()
for call in free unregister freehost; do
    env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" $call "$W/go" >"$W/$call.out" 2>&1 &
    pids+=($!)
done
all_ready() { grep -q ready "$W/free.out" && grep -q ready "$W/unregister.out" && grep -q ready "$W/freehost.out"; }
wait_for 30 all_ready || fail "whole_wait did not get ready: $(tail -qn 1 "$W"/free*.out "$W/unregister.out")"
env LD_PRELOAD="$SHIM" "$B/tests/waitvalue_exit" --hold >"$W/held.out" 2>&1 &
H=$!
wait_for 20 grep -q ready "$W/held.out" || fail "waitvalue_exit did not get ready: $(tail -2 "$W/held.out")"
touch "$W/go"
sleep 3
kill -0 "${pids[0]}" 2>/dev/null ||
    fail "the free did not wait for the held client's stream (nothing tested): $(tail -1 "$W/free.out")"
kill -9 "$H"
wait "$H" 2>/dev/null
t0=$(date +%s%N)
ended() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
if wait_for 30 ended; then
    echo "the calls held up ended $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
else
    fail "calls waiting for the whole device were still held up 30 s after the kill"
    kill -9 "${pids[@]}" 2>/dev/null
fi
i=0
for call in free unregister freehost; do
    wait "${pids[$i]}" || fail "whole_wait $call: $(tail -1 "$W/$call.out")"
    i=$((i + 1))
done
wait_for 60 no_clients || fail "the killed client was not released"
objs=$(server_objects)
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
if ! stop_server 10; then
    fail "the server did not quit"
    kill -9 "$S" 2>/dev/null # a stuck server must not outlive the test
fi
[ $rc = 0 ] && echo "PASS a killed client's wait on its device memory let go while others waited for the whole device"
exit $rc
