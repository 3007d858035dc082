#!/usr/bin/env bash
# A client leaves while another client's kernel waits for that other client's next launch (a
# collective's half waiting for its peer): the other client must go on (server/memory/quietctx.c).
# The departing client's release unregisters its host memory (its segment at least). In the
# shared context that unregistration waits for every client's work there, and the driver
# holds launches into the context while it waits (an H200, driver 580.159.04: tools/heldwait
# unregister --spin --launch), so the waiting kernel's peer launch stayed held until the
# kernel gave up: thread_peer failed in the GPU tier whenever the program before it was still
# being released. The server now unregisters a departed client's host memory in a context of
# its own, where nothing is waited for.
# Here: whole_wait nocode sets up (device memory, registered pages, pinned memory; no code: a
# client's load of code still waits for the whole device and holds launches, codegate.c, and
# its unload was not probed) and waits; thread_peer sync (tests/progs/thread_peer.c) begins to wait, its peer launch
# 2.5 s later; meanwhile whole_wait is killed, and its release frees and unregisters all it
# held, its segment too.
# Through a server with the quiet context (the default) thread_peer passes and the log says the
# quiet context was made; through one with MPSSHIM_QUIET_CONTEXT=0 thread_peer's kernel gives up
# (the hold this test is about, shown to be there). On the CPU test driver frees and
# unregistrations wait for their context's work and hold launches meanwhile as the real driver's
# do (MPSSHIM_CPUDRV_FREE_WAITS=2); on a GPU the real driver stands behind the server.
#   tests/leave_beside.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
real_driver_if_gpu
export MPSSHIM_SERVER_PER_GPU=0 # one server: the one whose release is tested
rc=0
# one_round NAME WORKDIR QUIET: a server of its own (MPSSHIM_QUIET_CONTEXT=QUIET), thread_peer
# beside a client that leaves; thread_peer's exit status, its output in
# WORKDIR/leave_beside/peer-NAME.out.
one_round() {
    own_dir "$2/leave_beside/$1"
    MPSSHIM_QUIET_CONTEXT=$3 MPSSHIM_CPUDRV_FREE_WAITS=2 "$CTL" -d || { fail "$1: no server"; return 1; }
    rm -f "$W/go"
    env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" nocode "$W/go" >"$W/leaver.out" 2>&1 &
    local X=$! P prc
    wait_for 30 grep -q ready "$W/leaver.out" || fail "$1: whole_wait did not get ready"
    THREAD_PEER_DELAY_MS=2500 env LD_PRELOAD="$SHIM" "$B/tests/thread_peer" sync \
        >"$W/peer.out" 2>&1 &
    P=$!
    wait_for 30 grep -q "waiting: sync" "$W/peer.out" || fail "$1: thread_peer did not begin to wait"
    kill -9 "$X"
    wait "$X" 2>/dev/null
    wait "$P"
    prc=$?
    cp "$W/peer.out" "$2/leave_beside/peer-$1.out"
    LOG1=$MPSSHIM_LOG_DIRECTORY/server.log
    stop_server 20 || fail "$1: the server did not quit"
    return $prc
}
if one_round quiet "$2" 1; then
    grep -q "Quiet context made" "$LOG1" ||
        fail "quiet: the server did not unregister the departed client's memory in its quiet context"
    echo "quiet: thread_peer's peer launch went on while another client left"
else
    fail "quiet: thread_peer: $(grep -m1 FAIL "$2/leave_beside/peer-quiet.out")"
fi
if one_round shared "$2" 0; then
    fail "shared: thread_peer passed with the unregistrations in the shared context: the hold is not there to test"
else
    grep -q "gave up" "$2/leave_beside/peer-shared.out" ||
        fail "shared: thread_peer failed otherwise: $(grep -m1 FAIL "$2/leave_beside/peer-shared.out")"
    echo "shared: as before, the leaving client's unregistration held the peer launch until the kernel gave up"
fi
[ $rc = 0 ] && echo "PASS a client that leaves holds up no other client's launches"
exit $rc
