#!/usr/bin/env bash
# The standby (server/handover/handover.c, MPSSHIM_STANDBY): a server process started before any
# fault, which takes over at one. The CPU test driver's cuInit is made to take 800 ms
# (MPSSHIM_CPUDRV_INIT_DELAY_MS), as a GPU's start-up takes a while; each mode's recovery
# (the new server's "shared context made again N ms after the fault") is printed, and the
# log must say the standby was used (init, context) or that the successor was started at the
# fault (off). No timing is asserted. Then: the standby is no client and serves nothing
# before it is told, is replaced when it dies, and is never left behind: not after `quit`,
# not after a fresh start (MPSSHIM_RECYCLE_IDLE), not after the server is SIGKILLed
# (PR_SET_PDEATHSIG). CPU test driver, servers of its own; with `gpu`, the real driver
# (exit 77 without a GPU) and its own start-up time: each mode's recovery on the GPU.
# usage: fault_standby.sh BUILD_DIR WORK_DIR [gpu]
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
WORK=$2/fault-standby
rm -rf "$WORK"
mkdir -p "$WORK"
if [ "${3:-}" = gpu ]; then
    real_driver_if_gpu || { echo "SKIP: no GPU"; exit 77; }
    SLOW="the driver's own start-up"
else
    export MPSSHIM_CPUDRV_INIT_DELAY_MS=800
    SLOW="a cuInit of 800 ms (CPU test driver)"
fi
fail() {
    echo "FAIL: $*"
    tail -n 30 "$MPSSHIM_LOG_DIRECTORY/server.log" 2>/dev/null
    ctl quit >/dev/null 2>&1
    exit 1
}
# ended PID: PID no longer runs (a zombie nobody reaps has ended too).
ended() { ! [ -e "/proc/$1" ] || grep -qs '^State:[[:space:]]*[ZX]' "/proc/$1/status"; }
standby() { ctl get_server_status | awk '/^Standby [0-9]+ ready/ {print $2}'; }
has_standby() { [ -n "$(standby)" ]; }
# standby_not PID: a ready standby other than PID.
standby_not() { local s; s=$(standby); [ -n "$s" ] && [ "$s" != "$1" ]; }
serves_after() { local p; p=$(server_pid); [ -n "$p" ] && [ "$p" != "$1" ]; }

# recovery MODE: a fault under MPSSHIM_STANDBY=MODE; prints the recovery line. RECOVERY_MS.
recovery() {
    use_dir "$WORK/$1"
    export MPSSHIM_STANDBY=$1
    local log=$MPSSHIM_LOG_DIRECTORY/server.log old new line
    "$CTL" -d || fail "$1: no server"
    old=$(server_pid)
    if [ "$1" != off ]; then
        wait_for 20 has_standby || fail "$1: no standby ready"
    else
        ctl get_server_status | grep -q "^Standby none (MPSSHIM_STANDBY=off)" || fail "off: a standby"
    fi
    shim "$B/tests/fault" >"$WORK/$1-faulter.log" 2>&1 || { cat "$WORK/$1-faulter.log"; fail "$1: faulter"; }
    wait_for 20 serves_after "$old" || fail "$1: no new server"
    new=$(server_pid)
    wait_for 10 grep -q "Server $new\] Device 0: shared context made again" "$log" || fail "$1: no recovery line"
    line=$(grep -o "Server $new\] Device 0: shared context made again.*" "$log")
    RECOVERY_MS=$(echo "$line" | awk '{print $9}')
    echo "MPSSHIM_STANDBY=$1: ${line#*\] }"
    shim "$B/tests/vecadd" 1000 | tail -n 1 | grep -q "^PASS" || fail "$1: a new client"
    case $1 in
    off) echo "$line" | grep -q "started at the fault" || fail "off: the successor was not started at the fault" ;;
    *) echo "$line" | grep -q "a standby since .* before the fault (MPSSHIM_STANDBY=$1)" ||
        fail "$1: the standby was not used" ;;
    esac
    local sb
    [ "$1" = off ] || { wait_for 20 has_standby || fail "$1: no standby behind the new server"; }
    sb=$(standby)
    stop_server 20 || fail "$1: the server did not quit"
    [ -z "$sb" ] || wait_for 10 ended "$sb" || fail "$1: standby $sb left after quit"
    wait_for 10 ended "$old" || fail "$1: the faulted server $old left after quit"
}

recovery off
off_ms=$RECOVERY_MS
recovery init
init_ms=$RECOVERY_MS
recovery context
context_ms=$RECOVERY_MS
echo "recovery with $SLOW: off $off_ms ms, init $init_ms ms, context $context_ms ms"

# The standby's life, in the default mode.
unset MPSSHIM_STANDBY
use_dir "$WORK/life"
export MPSSHIM_RECYCLE_IDLE=1
LOG=$MPSSHIM_LOG_DIRECTORY/server.log
"$CTL" -d || fail "no server"
S=$(server_pid)
wait_for 20 has_standby || fail "no standby"
sb=$(standby)
st=$(ctl get_server_status)
echo "$st" | grep -q "^Clients 0$" || fail "the standby counts as a client: $st"
[ "$(cat "/proc/$sb/comm")" = mpsshim-standby ] || fail "standby $sb is named $(cat "/proc/$sb/comm")"
grep -q "Server $sb\] Server ready" "$LOG" && fail "the standby said it serves"
shim "$B/tests/vecadd" 1000 | tail -n 1 | grep -q "^PASS" || fail "a client"
grep -q "Server $sb\] New client" "$LOG" && fail "the standby served a client"
grep -q "Server $S\] New client" "$LOG" || fail "the server did not serve the client"
echo "standby $sb: no client, serves nothing"

# A fresh start (after the client, 1 s idle): the old standby goes, the new image has its own.
wait_for 20 grep -q "Started afresh (1 time" "$LOG" || fail "no fresh start"
wait_for 10 ended "$sb" || fail "standby $sb left after the fresh start"
wait_for 20 standby_not "$sb" || fail "no standby after the fresh start"
sb2=$(standby)
echo "fresh start: standby $sb ended, $sb2 now"

# A standby that dies is replaced.
kill -KILL "$sb2"
wait_for 20 standby_not "$sb2" || fail "standby $sb2 was not replaced"
sb3=$(standby)
grep "Standby server $sb2 failed" "$LOG" | sed 's/^.*\] //'
echo "killed standby $sb2: replaced by $sb3"

# SIGKILL of the server: its standby dies with it.
kill -KILL "$S"
wait_for 10 ended "$S" || fail "server $S still runs after SIGKILL"
wait_for 10 ended "$sb3" || fail "standby $sb3 left after its server was SIGKILLed"
echo "SIGKILL of server $S: standby $sb3 ended too"
rm -f "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" "$MPSSHIM_PIPE_DIRECTORY/control.sock" \
    "$MPSSHIM_PIPE_DIRECTORY/server.pid"
echo "all checks passed"
