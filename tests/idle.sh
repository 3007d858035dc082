#!/usr/bin/env bash
# Idle answers the client knows (interpose/idle.c) against what only the server can tell it
# (CI tier, CPU test driver, a server of its own per case). A client (idle_answers --hold)
# makes every kind of idle answer known (a stream's and an event's query and
# synchronisation, its context's synchronisation) and asks them 1000 times each: the server
# must see none of them (get_client_info's "Requests served" stays put). Then, with nothing
# sent by the client since:
#   fault      another client faults the shared context (tests/progs/fault, a wild pointer);
#   terminate  terminate_client names the client;
#   quit       the server quits;
# and each of its five calls must answer the error (the fault's, sticky;
# CUDA_ERROR_MPS_CLIENT_TERMINATED; CUDA_ERROR_MPS_SERVER_NOT_READY), not the idle answer.
# Last, a copy into pageable memory makes its stream's answers known in the same way
# (idle_answers --copy: what CuPy's get(stream=...) does before it synchronises).
# usage: idle.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
W=$2/idle
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
fail() {
    echo "FAIL: $*"
    ctl quit >/dev/null 2>&1
    exit 1
}

# served PID: the requests the server replayed for client PID.
served() { ctl "get_client_info $1" | awk '/^  Requests served/ {print $3}'; }

# What each case does once the client's answers are known; sets WANT, the error every call
# must then answer.
do_fault() {
    shim "$B/tests/fault" >"$1/faulter.log" 2>&1 || { cat "$1/faulter.log"; fail "the faulting client"; }
    WANT=$(grep -o "Device 0: CUDA_ERROR_[A-Z_]* in the shared context" "$MPSSHIM_LOG_DIRECTORY/server.log" |
        head -n 1 | awk '{print $3}')
    [ -n "$WANT" ] || fail "the server did not see the fault"
}
do_terminate() {
    ctl "terminate_client $(server_pid) $2" >"$1/terminate.log"
    WANT=CUDA_ERROR_MPS_CLIENT_TERMINATED
}
do_quit() {
    stop_server 10 || fail "the server did not quit"
    WANT=CUDA_ERROR_MPS_SERVER_NOT_READY
}

# asked NAME MODE WHAT: on a server of its own in $W/NAME, an `idle_answers MODE GO1 GO2`
# client makes its answers known, then asks them (WHAT, for the log); the server must have
# served no request meanwhile. Sets DIR, CLIENT (still running, waiting for GO2) and OLD (the
# server's pid).
asked() {
    local name=$1 mode=$2 what=$3 before after
    DIR=$W/$name
    mkdir -p "$DIR"
    use_dir "$DIR"
    "$CTL" -d >"$DIR/start.log" 2>&1 || { cat "$DIR/start.log"; fail "$name: no server"; }
    OLD=$(server_pid)
    env LD_PRELOAD="$SHIM" "$B/tests/idle_answers" "$mode" "$DIR/go1" "$DIR/go2" >"$DIR/client.log" 2>&1 &
    CLIENT=$!
    wait_for 30 grep -q "^ready" "$DIR/client.log" || { cat "$DIR/client.log"; fail "$name: the client never got ready"; }
    before=$(served $CLIENT)
    touch "$DIR/go1"
    wait_for 60 grep -q "^queried" "$DIR/client.log" || { cat "$DIR/client.log"; fail "$name: the client never queried"; }
    after=$(served $CLIENT)
    echo "$name: requests served before $what: $before, after: $after"
    [ -n "$before" ] && [ "$before" = "$after" ] || fail "$name: the server was asked"
}

# one NAME: the case NAME.
one() {
    local name=$1
    asked "$name" --hold "5000 idle queries and synchronisations"
    "do_$name" "$DIR" "$CLIENT"
    touch "$DIR/go2"
    wait "$CLIENT" || { cat "$DIR/client.log"; fail "$name: the client failed"; }
    grep "^after:" "$DIR/client.log"
    [ "$(grep -c "^after: cu[A-Za-z]* $WANT$" "$DIR/client.log")" = 5 ] ||
        fail "$name: not every call answered $WANT"
    # After a fault a successor serves the directory, and the faulted server leaves with its
    # last client.
    stop_server 10 >/dev/null 2>&1
    wait_for 30 gone "$OLD" || fail "$name: server $OLD still runs"
    echo "ok $name"
}

# copy: a copy into pageable memory answers for its stream as a synchronisation does
# (idle_answers --copy): the 2000 questions after it must not reach the server either.
copy_case() {
    asked copy --copy "2000 questions after a copy into pageable memory"
    touch "$DIR/go2"
    wait "$CLIENT" || { cat "$DIR/client.log"; fail "copy: the client failed"; }
    stop_server 10 >/dev/null 2>&1
    echo "ok copy"
}

one fault
one terminate
one quit
copy_case
echo "all checks passed"
