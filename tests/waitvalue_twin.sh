#!/usr/bin/env bash
# A client killed while a stream of its waits for a value in its own DEVICE memory, while
# another client's call waits for the whole device (for that very stream), must not stop
# both for good (issue 11's twin of tests/hostfn_death.sh). On an H200 (580.159.04) a thread
# in cuMemFree, cuMemHostUnregister or cuMemFreeHost waits for every stream of the context,
# the blocked one too, and meanwhile cuStreamCreate in any other thread waits for it: the
# release, which made a stream to write the value that ends the wait, waited for the free,
# which waited for the release. A write on a stream made before goes through: the server
# makes its release streams at start (server/main.c, memops.c).
# Here: tests/waitvalue_exit --hold waits on its device memory; tests/vecadd's cuMemFree is
# the driver's (MPSSHIM_DEVICE_VMM=0), so it waits for the whole device, the held client's
# stream too (on the CPU test driver: MPSSHIM_CPUDRV_FREE_WAITS=1, and its stream creation
# waits meanwhile, MPSSHIM_CPUDRV_CREATE_WAITS=1, as the H200's did); tests/hostreg
# unregisters pinned memory likewise. Both must be held up while the client waits (else
# nothing is tested), then finish once it is killed; the killed client is released and the
# server holds nothing of it. On a GPU the real driver stands behind the server.
#   tests/waitvalue_twin.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    unset MPSSHIM_DRIVER MPSSHIM_CPUDRV_DEVICES # lib.sh's are the CPU driver's
fi
own_dir "$2/waitvalue-twin"
MPSSHIM_DEVICE_VMM=0 MPSSHIM_CPUDRV_FREE_WAITS=1 MPSSHIM_CPUDRV_CREATE_WAITS=1 "$CTL" -d || exit 1
env LD_PRELOAD="$SHIM" "$B/tests/waitvalue_exit" --hold >"$W/held.out" 2>&1 &
H=$!
wait_for 20 grep -q ready "$W/held.out" || fail "waitvalue_exit did not get ready: $(tail -2 "$W/held.out")"
env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 300000 >"$W/vecadd.out" 2>&1 &
V=$!
env LD_PRELOAD="$SHIM" "$B/tests/hostreg" >"$W/hostreg.out" 2>&1 &
R=$!
sleep 3
kill -0 "$V" 2>/dev/null ||
    fail "vecadd's free did not wait for the held client's stream (nothing tested): $(tail -1 "$W/vecadd.out")"
kill -9 "$H"
wait "$H" 2>/dev/null
t0=$(date +%s%N)
ended() { ! kill -0 "$V" 2>/dev/null && ! kill -0 "$R" 2>/dev/null; }
if wait_for 30 ended; then
    echo "the clients held up finished $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
else
    fail "clients waiting for the whole device were still held up 30 s after the kill"
    kill -9 "$V" "$R" 2>/dev/null
fi
wait "$V" || fail "vecadd: $(tail -1 "$W/vecadd.out")"
wait "$R" || fail "hostreg: $(tail -1 "$W/hostreg.out")"
wait_for 60 no_clients || fail "the killed client was not released"
objs=$(ctl get_server_status | awk '/^Objects/ {print $2, $3}' | tr -d '(')
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS a killed client's wait on its device memory let go while others waited for the whole device"
exit $rc
