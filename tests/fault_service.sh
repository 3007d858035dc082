#!/usr/bin/env bash
# A fault in a server run in the foreground (`mpsshim-control -f`: the main process of a
# systemd service or of a container): the pid the service manager knows must live as long
# as the service. After a fault a new server serves new clients, and the first process keeps
# watch over it (a keeper: no CUDA left in it); a second fault makes a chain of two keepers;
# `quit` to the live server ends the whole chain with exit status 0, and so does SIGTERM to
# the main pid (systemctl stop, docker stop). CPU test driver, servers of its own.
# usage: fault_service.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
W=$2/fault-service
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
use_dir "$W"
mkdir -p "$W"
fail() {
    echo "FAIL: $*"
    tail -n 30 "$MPSSHIM_LOG_DIRECTORY/server.log" 2>/dev/null
    exit 1
}
keeper() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "--keeper"; }
gone() { ! kill -0 "$1" 2>/dev/null; }

# start_fg: a foreground server in the background of this script; its pid in main.
start_fg() {
    "$CTL" -f >"$W/fg.log" 2>&1 &
    main=$!
    wait_for 10 test -S "$MPSSHIM_PIPE_DIRECTORY/control.sock" || fail "no foreground server"
    [ "$(server_pid)" = "$main" ] || fail "server.pid $(server_pid), not the foreground $main"
}
# fault_once: a client faults the live server; a new one must take over and serve.
fault_once() {
    local was
    was=$(server_pid)
    shim "$B/tests/fault" >"$W/faulter.log" 2>&1 || { cat "$W/faulter.log"; fail "faulter"; }
    wait_for 10 sh -c '[ "$(cat "$MPSSHIM_PIPE_DIRECTORY/server.pid")" != '"$was"' ]' ||
        fail "no new server after the fault in $was"
    shim "$B/tests/vecadd" 1000 | tail -n 1 | grep -q "^PASS" || fail "a new client"
    wait_for 10 keeper "$was" || fail "server $was did not become a keeper once its clients left"
}

start_fg
fault_once
first=$(server_pid)
fault_once
[ "$(server_pid)" != "$first" ] || fail "no third server"
keeper "$main" && keeper "$first" || fail "the chain is not $main, $first (keepers)"
echo "chain: keeper $main, keeper $first, server $(server_pid)"
live=$(server_pid)
ctl quit >/dev/null
timeout 20 tail --pid="$main" -f /dev/null || fail "the main pid did not end after quit"
wait "$main"
rc=$?
[ $rc = 0 ] || fail "main pid exit status $rc after quit"
gone "$first" && gone "$live" || fail "servers left after quit"
echo "quit: the chain ended, main pid status 0"

# SIGTERM to the main pid ends the service: the keeper passes it on.
start_fg
fault_once
live=$(server_pid)
kill -TERM "$main"
timeout 20 tail --pid="$main" -f /dev/null || fail "the main pid did not end after SIGTERM"
wait "$main"
rc=$?
[ $rc = 0 ] || fail "main pid exit status $rc after SIGTERM"
wait_for 10 gone "$live" || fail "server $live left after SIGTERM to the main pid"
echo "SIGTERM: the chain ended, main pid status 0"
! grep -q "tables not empty\|objects left" "$MPSSHIM_LOG_DIRECTORY/server.log" || fail "tables not empty"
echo "all checks passed"
