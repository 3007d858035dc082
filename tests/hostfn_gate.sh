#!/usr/bin/env bash
# A call that waits for every stream of the shared context (here a client's
# cuMemHostUnregister) while another client's stream is held on a host function whose page
# fault only that client's own worker can serve (server/code/codegate.c, "calls that wait for
# every stream"). On an H200 (580.159.04) a killed client's release unregistering its managed
# memory waited in the driver for a bystander's stream held so, while the bystander's worker
# was held in the driver behind it: both stopped for good (tests/managed_kill.sh). The server
# now lets such calls wait outside the driver until no client-held wait is pending.
# Here (in the shared context: MPSSHIM_QUIET_CONTEXT=0; in the quiet context, the default,
# an unregistration waits for nothing) tests/whole_wait unregister sets up; tests/hostfn_fault queues a 2 s kernel and a host
# function behind it that touches the managed memory the kernel writes, then prefetches the
# memory on the NULL stream (the server makes a stream for it); meanwhile whole_wait
# unregisters its pages. Both must pass, the unregistration must have waited in the server
# (else nothing is tested), and the server must hold nothing of them after. On the CPU test
# driver the unregistration waits for the whole context (MPSSHIM_CPUDRV_FREE_WAITS=1) and
# stream creation waits meanwhile (MPSSHIM_CPUDRV_CREATE_WAITS=1), as the H200's did; on a
# GPU the real driver stands behind the server.
# Then the same process's own unregistration, module load, function lookup, library kernel's
# first launch, free, module unload and IPC close while its host function is still to run (hostfn_fault --own): each
# waits for the host function, which goes on.
# Then (CPU test driver only) the bound: with MPSSHIM_RELEASE_TIMEOUT=1, a client killed
# while a tests/hostfn_stuck client's host function never returns is released all the same:
# its release's unregistrations wait 1 s for the gate, then go on, said in the log (on a GPU
# the driver itself would then wait for that stream, as it did before the gate).
# Then (CPU test driver only) a client's own load held by its own stuck host function says so.
#   tests/hostfn_gate.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
GPU=0
real_driver_if_gpu && GPU=1
# done_server: the server (pid S) holds no client and nothing of them, and quits.
done_server() {
    wait_for 30 no_clients || fail "clients left: $(ctl get_server_status | grep '^Clients')"
    local objs
    objs=$(server_objects)
    [ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
    if ! stop_server 10; then
        fail "the server did not quit"
        kill -9 "$S" 2>/dev/null
    fi
}
# one_round QUIET: the scenario above through a server with MPSSHIM_QUIET_CONTEXT=QUIET.
one_round() {
    own_dir "$2/hostfn-gate-quiet$1"
    rm -f "$W/go"
    MPSSHIM_QUIET_CONTEXT=$1 MPSSHIM_CPUDRV_FREE_WAITS=1 MPSSHIM_CPUDRV_CREATE_WAITS=1 "$CTL" -d || exit 1
    S=$(server_pid)
    LOG=$MPSSHIM_LOG_DIRECTORY/server.log
    env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" unregister "$W/go" >"$W/unregister.out" 2>&1 &
    U=$!
    wait_for 30 grep -q ready "$W/unregister.out" || fail "whole_wait did not get ready: $(tail -1 "$W/unregister.out")"
    env LD_PRELOAD="$SHIM" "$B/tests/hostfn_fault" 2000 >"$W/hostfn.out" 2>&1 &
    H=$!
    wait_for 30 grep -q held "$W/hostfn.out" || fail "hostfn_fault did not get its host function queued: $(tail -1 "$W/hostfn.out")"
    touch "$W/go"
    wait "$H" || fail "hostfn_fault: $(grep -m1 FAIL "$W/hostfn.out")"
    wait "$U" || fail "whole_wait unregister: $(grep -m1 FAIL "$W/unregister.out")"
}
# In the shared context (MPSSHIM_QUIET_CONTEXT=0, or where the quiet context cannot be made)
# the unregistration waits for every stream there: it must have waited in the server, at the
# gate (else nothing is tested).
one_round 0 "$2"
grep -q "Client process $U: unregistering host memory on device 0 waits until no client's stream waits" "$LOG" ||
    fail "the unregistration did not wait in the server (nothing tested)"
done_server
[ $rc = 0 ] && echo "ok a host function's page fault served while another client's unregistration waited for every stream"
# Registered and unregistered in the quiet context (server/memory/quietctx.c) it waits for
# nothing, so not at the gate either.
one_round 1 "$2"
grep -q "Client process $U: unregistering host memory" "$LOG" &&
    fail "an unregistration in the quiet context waited at the gate: $(grep "Client process $U: unregistering" "$LOG" | head -1)"
done_server
[ $rc = 0 ] && echo "ok an unregistration in the quiet context waits for no other client's stream"

# The same process's own call that waits for every stream, made while its host function is
# still to run: an unregistration, a module load, a function got (its code loaded then), a
# library kernel's first launch (its code loaded in the context then), a cuMemFree of device
# memory, a module's unload, the close of another process's exported memory. The call must wait for the host function (as natively) without holding the worker
# its touch needs (interpose/hostfn.c, shim_hostfn_settle): before, both stopped for good
# (the last five until 2026-11-29).
own_dir "$2/hostfn-gate-own"
MPSSHIM_CPUDRV_FREE_WAITS=1 MPSSHIM_CPUDRV_CREATE_WAITS=1 "$CTL" -d || exit 1
S=$(server_pid)
for call in unregister load getfunc launch free unload ipcclose; do
    timeout -k 5 30 env LD_PRELOAD="$SHIM" "$B/tests/hostfn_fault" 1000 --own "$call" \
        >"$W/own-$call.out" 2>&1
    st=$?
    [ "$st" = 0 ] || fail "hostfn_fault --own $call (status $st; 124: it never ended):" \
        "$(grep -m1 FAIL "$W/own-$call.out" || tail -n 1 "$W/own-$call.out")"
done
done_server
[ $rc = 0 ] && echo "ok a host function's page fault served while its own process's unregistration, module load, function lookup, first launch, free, unload and IPC close waited for it"

if [ "$GPU" = 0 ]; then
    own_dir "$2/hostfn-gate-bound"
    rm -f "$W/go"
    # The gate's bound is for unregistrations in the shared context (quietctx.c: where the
    # quiet context cannot be made).
    MPSSHIM_QUIET_CONTEXT=0 MPSSHIM_RELEASE_TIMEOUT=1 "$CTL" -d || exit 1
    S=$(server_pid)
    LOG=$MPSSHIM_LOG_DIRECTORY/server.log
    # whole_wait first: its code load would wait for the stuck host function.
    env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" unregister "$W/go" >"$W/unregister.out" 2>&1 &
    U=$!
    wait_for 30 grep -q ready "$W/unregister.out" || fail "whole_wait did not get ready: $(tail -1 "$W/unregister.out")"
    env LD_PRELOAD="$SHIM" "$B/tests/hostfn_stuck" >"$W/stuck.out" 2>&1 &
    P=$!
    wait_for 20 grep -q ready "$W/stuck.out" || fail "hostfn_stuck did not get ready: $(tail -2 "$W/stuck.out")"
    # Where the stuck client is held, as get_client_info tells an operator: its host function
    # reached and not returned, a wait only it can end that the GPU has not passed.
    info=$(ctl "get_client_info $P")
    echo "$info" | grep -q "Host functions: the last enqueued number 1, the last reached by its stream number 1 (not returned yet)" &&
        echo "$info" | grep -q "Waits only it can end, not yet passed by the GPU: device 0: 1 host function" ||
        fail "get_client_info did not say where hostfn_stuck is held: $info"
    kill -9 "$U"
    wait "$U" 2>/dev/null
    released() { grep -q "Client process $U disconnected" "$LOG"; }
    wait_for 20 released || fail "a killed client was not released while another's host function hung"
    grep -q "Client process $U: unregistering host memory on device 0 goes on after .*pending waits of: client process $P (1 host function)" "$LOG" ||
        fail "the release did not say it went on past the gate: $(grep "Client process $U" "$LOG" | tail -1)"
    kill -0 "$P" 2>/dev/null || fail "hostfn_stuck ended (nothing tested)"
    kill -9 "$P"
    wait "$P" 2>/dev/null
    done_server
    [ $rc = 0 ] && echo "ok a departed client's release went on past the gate after MPSSHIM_RELEASE_TIMEOUT"

    # Work a departed client left running (runaway --hostfn on device 1: a 60 s kernel, a host
    # function behind it), its release given up after 1 s: the host function's wait, pending
    # behind the kernel, no longer holds another client's unregistration (whole_wait on device
    # 0, which waits for every device's gate), and the log names the stream still running and
    # its last kernel. Before, the unregistration waited for the kernel.
    own_dir "$2/hostfn-gate-abandoned"
    rm -f "$W/go"
    MPSSHIM_QUIET_CONTEXT=0 MPSSHIM_RELEASE_TIMEOUT=1 "$CTL" -d || exit 1
    S=$(server_pid)
    LOG=$MPSSHIM_LOG_DIRECTORY/server.log
    CUDA_VISIBLE_DEVICES=1 env LD_PRELOAD="$SHIM" "$B/tests/runaway" 60 --hostfn >"$W/runaway.out" 2>&1 ||
        fail "runaway: $(tail -1 "$W/runaway.out")"
    abandoned() { grep -q "1 of its waits are still pending behind its work left running" "$LOG"; }
    wait_for 20 abandoned || fail "the release did not say its wait was left: $(tail -2 "$LOG")"
    grep -q "device 1, its legacy default stream still runs; the last kernel launched there: delay_set" "$LOG" ||
        fail "the release did not name the stream still running: $(grep "still run" "$LOG")"
    env LD_PRELOAD="$SHIM" "$B/tests/whole_wait" unregister "$W/go" >"$W/unregister2.out" 2>&1 &
    U=$!
    wait_for 30 grep -q ready "$W/unregister2.out" || fail "whole_wait did not get ready: $(tail -1 "$W/unregister2.out")"
    touch "$W/go"
    wait_for 20 gone "$U" || fail "an unregistration waited for work a departed client left running"
    wait "$U" 2>/dev/null
    grep -q "^PASS" "$W/unregister2.out" || fail "whole_wait: $(tail -1 "$W/unregister2.out")"
    ctl quit >/dev/null 2>&1
    wait_for 20 gone "$S" || kill -9 "$S" 2>/dev/null
    [ $rc = 0 ] && echo "ok a wait left behind a departed client's running work holds no other client's unregistration"

    # A client's own code load while its own host function never returns waits for it in the
    # shim (interpose/hostfn.c), for ever as natively, and says so on its stderr after 10 s:
    # the line that points at such a hang.
    own_dir "$2/hostfn-gate-said"
    "$CTL" -d || exit 1
    S=$(server_pid)
    env LD_PRELOAD="$SHIM" "$B/tests/hostfn_stuck" --load >"$W/load.out" 2>&1 &
    P=$!
    said() { grep -q "has waited 10 s for this process's host function 1 (device 0), queued before it, to return" "$W/load.out"; }
    wait_for 30 said || fail "a load waiting for the process's own host function did not say so: $(tail -2 "$W/load.out")"
    kill -9 "$P"
    wait "$P" 2>/dev/null
    done_server
    [ $rc = 0 ] && echo "ok a load held by the process's own host function says so after 10 s"
fi
[ $rc = 0 ] && echo "PASS calls that wait for every stream wait in the server, and a release only for so long"
exit $rc
