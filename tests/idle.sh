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
# (idle_answers --copy: what PyTorch's `.item()` does before it synchronises).
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

# one NAME: the case NAME, on a server of its own.
one() {
    local name=$1 dir=$W/$1 client before after old
    mkdir -p "$dir"
    use_dir "$dir"
    "$CTL" -d >"$dir/start.log" 2>&1 || { cat "$dir/start.log"; fail "$name: no server"; }
    old=$(server_pid)
    env LD_PRELOAD="$SHIM" "$B/tests/idle_answers" --hold "$dir/go1" "$dir/go2" >"$dir/client.log" 2>&1 &
    client=$!
    wait_for 30 grep -q "^ready" "$dir/client.log" || { cat "$dir/client.log"; fail "$name: the client never got ready"; }
    before=$(served $client)
    touch "$dir/go1"
    wait_for 60 grep -q "^queried" "$dir/client.log" || { cat "$dir/client.log"; fail "$name: the client never queried"; }
    after=$(served $client)
    echo "$name: requests served before 5000 idle queries and synchronisations: $before, after: $after"
    [ -n "$before" ] && [ "$before" = "$after" ] || fail "$name: the server was asked"
    "do_$name" "$dir" "$client"
    touch "$dir/go2"
    wait "$client" || { cat "$dir/client.log"; fail "$name: the client failed"; }
    grep "^after:" "$dir/client.log"
    [ "$(grep -c "^after: cu[A-Za-z]* $WANT$" "$dir/client.log")" = 5 ] ||
        fail "$name: not every call answered $WANT"
    # After a fault a successor serves the directory, and the faulted server leaves with its
    # last client.
    stop_server 10 >/dev/null 2>&1
    wait_for 30 gone "$old" || fail "$name: server $old still runs"
    echo "ok $name"
}

# copy: a copy into pageable memory answers for its stream as a synchronisation does
# (idle_answers --copy): the 2000 questions after it must not reach the server either.
copy_case() {
    local dir=$W/copy client before after
    mkdir -p "$dir"
    use_dir "$dir"
    "$CTL" -d >"$dir/start.log" 2>&1 || { cat "$dir/start.log"; fail "copy: no server"; }
    env LD_PRELOAD="$SHIM" "$B/tests/idle_answers" --copy "$dir/go1" "$dir/go2" >"$dir/client.log" 2>&1 &
    client=$!
    wait_for 30 grep -q "^ready" "$dir/client.log" || { cat "$dir/client.log"; fail "copy: the client never got ready"; }
    before=$(served $client)
    touch "$dir/go1"
    wait_for 60 grep -q "^queried" "$dir/client.log" || { cat "$dir/client.log"; fail "copy: the client never queried"; }
    after=$(served $client)
    touch "$dir/go2"
    wait "$client" || { cat "$dir/client.log"; fail "copy: the client failed"; }
    echo "copy: requests served before 2000 questions after a copy into pageable memory: $before, after: $after"
    [ -n "$before" ] && [ "$before" = "$after" ] || fail "copy: the server was asked"
    stop_server 10 >/dev/null 2>&1
    echo "ok copy"
}

one fault
one terminate
one quit
copy_case
echo "all checks passed"
