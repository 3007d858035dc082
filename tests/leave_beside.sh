#!/usr/bin/env bash
# A client leaves while another client's kernel waits for that other client's next launch (a
# collective's half waiting for its peer): the other client must go on (server/memory/quietctx.c).
# The departing client's release unregisters its host memory (its segment at least). In the
# shared context that unregistration waits for every client's work there, and the driver
# holds launches into the context while it waits (an H200, driver 580.159.04: tools/heldwait
# unregister --spin --launch), so the waiting kernel's peer launch stayed held until the
# kernel gave up: thread_peer failed in the GPU tier whenever the program before it was still
# being released. The server now registers all host memory in a context of its own and unregisters it there,
# where nothing is waited for (server/memory/quietctx.c).
# Here: whole_wait nocode sets up (device memory, registered pages and pinned memory; no code)
# and waits; thread_peer sync (tests/progs/thread_peer.c) begins to wait, its peer launch 2.5 s
# later; meanwhile whole_wait is killed, and its release frees and unregisters all it held, its
# segment too. Through a server with the quiet context (the default) thread_peer passes and the
# log says the quiet context was made; through one with MPSSHIM_QUIET_CONTEXT=0 thread_peer's
# kernel gives up (the hold this test is about, shown to be there).
# Then whole_wait libcode, whose library's kernel ran: a library's unload whose code was loaded
# in the context holds launches so too (heldwait libunload --spin --launch), and the server
# keeps such libraries until no client is left (server/code/unloads.c). Its own unload and its
# release's must let thread_peer pass; with MPSSHIM_KEEP_LIBRARIES=0 its own unload must not;
# alone, nothing is kept; one process keeps 32 at most.
# Clients that come while the quiet context is being made are served at once (segment.c).
# On the CPU test driver frees, unregistrations and such unloads wait for their context's work
# and hold launches meanwhile as the real driver's do (MPSSHIM_CPUDRV_FREE_WAITS=2); on a GPU
# the real driver stands behind the server.
#   tests/leave_beside.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
GPU=""
real_driver_if_gpu && GPU=1
export MPSSHIM_SERVER_PER_GPU=0 # one server: the one whose release is tested
rc=0
# one_round NAME WORKDIR MODE HOW SETTING...: a server of its own (with the settings given:
# VAR=VALUE), thread_peer beside a client (whole_wait MODE) that leaves (HOW: kill, or go: it
# makes its last call, then exits); thread_peer's exit status, its output in
# WORKDIR/leave_beside/peer-NAME.out, the server's log in LOG1.
one_round() {
    local name=$1 dir=$2 mode=$3 how=$4
    shift 4
    own_dir "$dir/leave_beside/$name"
    env "$@" MPSSHIM_CPUDRV_FREE_WAITS=2 "$CTL" -d || { fail "$name: no server"; return 1; }
    rm -f "$W/go"
    env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" "$mode" "$W/go" >"$W/leaver.out" 2>&1 &
    local X=$! P prc
    wait_for 30 grep -q ready "$W/leaver.out" || fail "$name: whole_wait did not get ready"
    THREAD_PEER_DELAY_MS=2500 env LD_PRELOAD="$SHIM" "$B/tests/thread_peer" sync \
        >"$W/peer.out" 2>&1 &
    P=$!
    wait_for 30 grep -q "waiting: sync" "$W/peer.out" || fail "$name: thread_peer did not begin to wait"
    if [ "$how" = kill ]; then
        kill -9 "$X"
        wait "$X" 2>/dev/null
    else
        touch "$W/go"
    fi
    wait "$P"
    prc=$?
    [ "$how" = kill ] || wait "$X" || fail "$name: whole_wait $mode: $(grep -m1 FAIL "$W/leaver.out")"
    cp "$W/peer.out" "$dir/leave_beside/peer-$name.out"
    LOG1=$MPSSHIM_LOG_DIRECTORY/server.log
    wait_for 30 no_clients || fail "$name: clients left"
    if [ "$mode" = libcode ] && [ "$how" = kill ]; then
        # The library its release kept goes once no client is left (unloads.c).
        wait_for 10 grep -q "Unloaded 1 libraries kept" "$LOG1" ||
            fail "$name: the library kept was not unloaded once no client was left"
    fi
    stop_server 20 || fail "$name: the server did not quit"
    return $prc
}
if one_round quiet "$2" nocode kill MPSSHIM_QUIET_CONTEXT=1; then
    grep -q "Quiet context made" "$LOG1" ||
        fail "quiet: the server did not register the client's memory in its quiet context"
    echo "quiet: thread_peer's peer launch went on while another client left"
else
    fail "quiet: thread_peer: $(grep -m1 FAIL "$2/leave_beside/peer-quiet.out")"
fi
# The quiet context is made when a client first needs it (server/memory/quietctx.c): a client
# that only holds a context and device memory (hold: 1 MiB, set by a memset) does not start its
# making. Clients that arrive while it is being made are served at once, their segments
# registered once it is made (server/core/segment.c); here its making takes 3 s on the CPU test
# driver (MPSSHIM_CPUDRV_CTX_DELAY_MS; on an H200 0.6-1.5 s, up to 7.8 s beside other servers'
# makings). hold --copy's copy starts it, and vecadd is done before it is made; hostfn, whose host
# functions need its segment device-mapped, waits for it; whole_wait, started with the server
# too, leaves beside thread_peer, which goes on.
own_dir "$2/leave_beside/early"
LOG1=$MPSSHIM_LOG_DIRECTORY/server.log
rm -f "$LOG1" # this server's lines only
MPSSHIM_CPUDRV_CTX_DELAY_MS=3000 "$CTL" -d || fail "early: no server"
env LD_PRELOAD="$SHIM" "$B/tests/hold" 60 >"$W/hold.out" 2>&1 &
HOLD=$!
wait_for 30 grep -q '^ready' "$W/hold.out" || fail "early: hold did not get ready"
sleep 0.2 # its memset, which it does not wait for, served
! grep -q "Making the quiet context\|Quiet context made" "$LOG1" ||
    fail "early: a client that only holds memory started the quiet context's making: $(grep -m1 "Making the quiet" "$LOG1")"
# A copy through the staging slots, in the segment, starts it (at the client's next record).
env LD_PRELOAD="$SHIM" "$B/tests/hold" 60 --copy >"$W/hold-copy.out" 2>&1 &
HOLD2=$! # env runs hold in its own process: the pid the log names
wait_for 30 grep -q '^ready' "$W/hold-copy.out" || fail "early: hold --copy did not get ready"
wait_for 5 grep -q "Making the quiet context for host memory, first needed by client process $HOLD2 (a copy through its staging slots)" "$LOG1" ||
    fail "early: a copy through the staging slots did not start the quiet context's making: $(grep -m1 "Making the quiet" "$LOG1")"
shim "$B/tests/vecadd" >"$W/vecadd.out" 2>&1 || fail "early: vecadd: $(grep -m1 FAIL "$W/vecadd.out")"
[ -n "$GPU" ] || ! grep -q "Quiet context made" "$LOG1" ||
    fail "early: the quiet context was made before vecadd was done: nothing tested"
shim "$B/tests/hostfn" >"$W/hostfn.out" 2>&1 || fail "early: hostfn: $(grep -m1 FAIL "$W/hostfn.out")"
grep -q "Quiet context made" "$LOG1" || fail "early: hostfn passed, but no quiet context was made"
kill "$HOLD" "$HOLD2" 2>/dev/null
wait "$HOLD" "$HOLD2" 2>/dev/null
stop_server 20 || fail "early: the server did not quit"
if one_round early "$2" nocode kill MPSSHIM_CPUDRV_CTX_DELAY_MS=3000; then
    [ $rc = 0 ] && echo "early: clients served while the quiet context was made; one that left then held up no other"
else
    fail "early: thread_peer: $(grep -m1 FAIL "$2/leave_beside/peer-early.out")"
fi
if one_round shared "$2" nocode kill MPSSHIM_QUIET_CONTEXT=0; then
    fail "shared: thread_peer passed with the unregistrations in the shared context: the hold is not there to test"
else
    grep -q "gave up" "$2/leave_beside/peer-shared.out" ||
        fail "shared: thread_peer failed otherwise: $(grep -m1 FAIL "$2/leave_beside/peer-shared.out")"
    echo "shared: as before, the leaving client's unregistration held the peer launch until the kernel gave up"
fi
# A client whose library's code ran: its own unload (cudart's at a program's exit), and its
# release's when it is killed, kept until no client is left (server/code/unloads.c); with
# MPSSHIM_KEEP_LIBRARIES=0 its own unload holds the peer launch as before.
for how in go kill; do
    if one_round "library-$how" "$2" libcode "$how" MPSSHIM_KEEP_LIBRARIES=1; then
        echo "library-$how: thread_peer's peer launch went on while another client's library was let go of"
    else
        fail "library-$how: thread_peer: $(grep -m1 FAIL "$2/leave_beside/peer-library-$how.out")"
    fi
done
if one_round library-at-once "$2" libcode go MPSSHIM_KEEP_LIBRARIES=0; then
    fail "library-at-once: thread_peer passed with the library unloaded at once: the hold is not there to test"
else
    grep -q "gave up" "$2/leave_beside/peer-library-at-once.out" ||
        fail "library-at-once: thread_peer failed otherwise: $(grep -m1 FAIL "$2/leave_beside/peer-library-at-once.out")"
    echo "library-at-once: as before, the library's unload held the peer launch until the kernel gave up"
fi
# Alone, a client's unload holds up nobody: its library goes at once, nothing is kept.
own_dir "$2/leave_beside/library-alone"
MPSSHIM_CPUDRV_FREE_WAITS=2 "$CTL" -d || fail "library-alone: no server"
touch "$W/go"
env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" libcode "$W/go" >"$W/leaver.out" 2>&1 ||
    fail "library-alone: whole_wait libcode: $(grep -m1 FAIL "$W/leaver.out")"
wait_for 30 no_clients || fail "library-alone: clients left"
sleep 0.5 # the main loop's idle tick, where a kept library would go (and be said)
grep -q "libraries kept" "$MPSSHIM_LOG_DIRECTORY/server.log" &&
    fail "library-alone: a client alone had its library kept"
stop_server 20 || fail "library-alone: the server did not quit"
[ $rc = 0 ] && echo "library-alone: a client alone unloads its library at once"

# One process's libraries kept are at most 32 (unloads.c): 40 unloaded while another client is
# served, 32 kept and the rest unloaded at once, said; the 32 go once no client is left.
own_dir "$2/leave_beside/library-cap"
MPSSHIM_CPUDRV_FREE_WAITS=2 "$CTL" -d || fail "library-cap: no server"
rm -f "$W/go" "$W/go2"
env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" nocode "$W/go2" >"$W/other.out" 2>&1 &
O=$!
wait_for 30 grep -q ready "$W/other.out" || fail "library-cap: whole_wait nocode did not get ready"
touch "$W/go"
WHOLE_WAIT_LIBS=40 env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" libcode "$W/go" >"$W/leaver.out" 2>&1 ||
    fail "library-cap: whole_wait libcode: $(grep -m1 FAIL "$W/leaver.out")"
touch "$W/go2"
wait "$O" || fail "library-cap: whole_wait nocode: $(grep -m1 FAIL "$W/other.out")"
wait_for 30 no_clients || fail "library-cap: clients left"
LOG1=$MPSSHIM_LOG_DIRECTORY/server.log
wait_for 10 grep -q "Unloaded 32 libraries kept" "$LOG1" ||
    fail "library-cap: not 32 kept: $(grep "libraries kept\|libraries whose code" "$LOG1")"
grep -q "32 of its libraries whose code ran are kept" "$LOG1" ||
    fail "library-cap: the cap was not said"
stop_server 20 || fail "library-cap: the server did not quit"
[ $rc = 0 ] && echo "library-cap: a process's libraries kept stop at 32"
[ $rc = 0 ] && echo "PASS a client that leaves holds up no other client's launches"
exit $rc
