#!/usr/bin/env bash
# A fault in a server run in the foreground (`mpsshim-control -f`: the main process of a
# systemd service or of a container): the pid the service manager knows must live as long
# as the service. After a fault a new server (its standby) serves new clients, and the first
# process keeps watch over it once its clients have left (a keeper: no CUDA left in it); a
# second fault leaves no second keeper: the faulted successor exits once its clients have
# left, and the live server stays below the main pid (a child subreaper). `quit` to the live
# server ends the service with exit status 0, and so does SIGTERM to the main pid (systemctl
# stop, docker stop); no standby is left behind. CPU test driver, servers of its own.
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
    ctl quit >/dev/null 2>&1
    [ -n "${main:-}" ] && kill -TERM "$main" 2>/dev/null
    exit 1
}
keeper() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "--keeper"; }
# ended PID: PID no longer runs (a zombie nobody reaps has ended too).
ended() { ! [ -e "/proc/$1" ] || grep -qs '^State:[[:space:]]*[ZX]' "/proc/$1/status"; }
ppid_of() { awk '/^PPid:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
standby() { ctl get_server_status | awk '/^Standby [0-9]+ ready/ {print $2}'; }
has_standby() { [ -n "$(standby)" ]; }
below() { [ "$(ppid_of "$1")" = "$2" ]; }
serves_after() { local p; p=$(server_pid); [ -n "$p" ] && [ "$p" != "$1" ]; }

# start_fg: a foreground server in the background of this script; its pid in main.
start_fg() {
    "$CTL" -f >"$W/fg.log" 2>&1 &
    main=$!
    wait_for 10 test -S "$MPSSHIM_PIPE_DIRECTORY/control.sock" || fail "no foreground server"
    [ "$(server_pid)" = "$main" ] || fail "server.pid $(server_pid), not the foreground $main"
}
# fault_once: a client faults the live server; a new one (its standby) must take over and
# serve.
fault_once() {
    was=$(server_pid)
    wait_for 10 has_standby || fail "server $was has no standby"
    local sb
    sb=$(standby)
    shim "$B/tests/fault" >"$W/faulter.log" 2>&1 || { cat "$W/faulter.log"; fail "faulter"; }
    wait_for 10 serves_after "$was" || fail "no new server after the fault in $was"
    [ "$(server_pid)" = "$sb" ] || fail "server $(server_pid) took over, not the standby $sb"
    shim "$B/tests/vecadd" 1000 | tail -n 1 | grep -q "^PASS" || fail "a new client"
}

start_fg
fault_once
wait_for 10 keeper "$main" || fail "the main pid $main did not become a keeper once its clients left"
first=$(server_pid)
fault_once
[ "$(server_pid)" != "$first" ] || fail "no third server"
wait_for 10 ended "$first" || fail "the faulted successor $first did not exit once its clients left"
live=$(server_pid)
keeper "$main" || fail "the main pid $main is no keeper"
wait_for 10 below "$live" "$main" ||
    fail "the live server $live is not below the main pid $main (its parent: $(ppid_of "$live"))"
sb=$(standby)
echo "chain: keeper $main, server $live (its standby ${sb:-none}); $first exited"
ctl quit >/dev/null
timeout 20 tail --pid="$main" -f /dev/null || fail "the main pid did not end after quit"
wait "$main"
rc=$?
[ $rc = 0 ] || fail "main pid exit status $rc after quit"
wait_for 10 ended "$live" || fail "server $live left after quit"
[ -z "$sb" ] || wait_for 10 ended "$sb" || fail "standby $sb left after quit"
echo "quit: the chain ended, main pid status 0, no standby left"

# SIGTERM to the main pid ends the service, while it still serves a faulted client that
# stays (it passes the stop on to the live server; the client's later calls fail).
start_fg
wait_for 10 has_standby || fail "no standby"
env LD_PRELOAD="$SHIM" "$B/tests/fault" --keep 3 >"$W/stays.log" 2>&1 &
stays=$!
wait_for 10 grep -q "^faulted" "$W/stays.log" || { cat "$W/stays.log"; fail "the client that stays"; }
wait_for 10 serves_after "$main" || fail "no new server after the fault in $main"
live=$(server_pid)
keeper "$main" && fail "the main pid became a keeper while its client stays"
kill -TERM "$main"
timeout 20 tail --pid="$main" -f /dev/null || fail "the main pid did not end after SIGTERM"
wait "$main"
rc=$?
[ $rc = 0 ] || fail "main pid exit status $rc after SIGTERM"
wait_for 10 ended "$live" || fail "server $live left after SIGTERM to the main pid"
wait "$stays" || { cat "$W/stays.log"; fail "the client that stayed"; }
grep "after the fault returned" "$W/stays.log"
echo "SIGTERM: the chain ended, main pid status 0"
! grep -q "tables not empty\|objects left" "$MPSSHIM_LOG_DIRECTORY/server.log" || fail "tables not empty"
echo "all checks passed"
