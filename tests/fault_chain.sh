#!/usr/bin/env bash
# Faults must not pile up server processes (issue 34, S10). Five clients in a row each fault
# the live server and then keep their connection without a call (fault --keep): each fault
# hands over to a new server, and before the fix each faulted server lived on as long as its
# client, five of them (with their dead contexts' memory, on a GPU) beside the live one.
#   1. MPSSHIM_FAULT_LINGER=60: at most 4 faulted servers stay alive at once (the fifth
#      fault has the oldest end its client at once, and it exits), get_server_status counts
#      them, and `quit` to the live server ends them all.
#   2. MPSSHIM_FAULT_LINGER=3: once the linger has passed every faulted server has ended its
#      client and exited: only the live server is left (and its standby), and
#      get_server_status says "Faulted servers 0".
# In both, each client's calls after the end fail (CUDA_ERROR_MPS_CLIENT_TERMINATED, or
# CUDA_ERROR_MPS_SERVER_NOT_READY after the quit) instead of hanging. CPU test driver,
# servers of its own.
# usage: fault_chain.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
W=$2/fault-chain
rm -rf "$W"
mkdir -p "$W"
use_dir "$W"
LOG=$MPSSHIM_LOG_DIRECTORY/server.log
fail() {
    echo "FAIL: $*"
    servers | while read -r p; do echo "  server $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"; done
    tail -n 30 "$LOG" 2>/dev/null
    ctl quit >/dev/null 2>&1
    exit 1
}

# servers: the running server processes of our pipe directory (this build's program, by its
# environment; not a standby, not a zombie), one pid a line.
servers() {
    local e p
    for e in /proc/[0-9]*/environ; do
        p=${e%/environ}
        grep -qsz "^MPSSHIM_PIPE_DIRECTORY=$MPSSHIM_PIPE_DIRECTORY\$" "$e" || continue
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$B/mpsshim-server" ] || continue
        grep -qs '^State:[[:space:]]*[ZX]' "$p/status" && continue
        [ "$(cat "$p/comm" 2>/dev/null)" = mpsshim-standby ] && continue
        echo "${p#/proc/}"
    done
}
nservers() { servers | wc -l; }
nservers_is() { [ "$(nservers)" = "$1" ]; }
# serves_after PID: server.pid names a server other than PID.
serves_after() { local p; p=$(server_pid); [ -n "$p" ] && [ "$p" != "$1" ]; }
faulted_line() { ctl get_server_status | grep "^Faulted servers" || echo "Faulted servers (no line)"; }
ended() { ! [ -e "/proc/$1" ] || grep -qs '^State:[[:space:]]*[ZX]' "/proc/$1/status"; }

# faults N KEEP TAG: N clients in a row each fault the live server and stay KEEP s; their
# pids in CLIENTS, the servers they faulted in FAULTED (oldest first).
faults() {
    CLIENTS="" FAULTED=""
    local i was c
    for i in $(seq "$1"); do
        was=$(server_pid)
        env LD_PRELOAD="$SHIM" "$B/tests/fault" --keep "$2" >"$W/$3-$i.log" 2>&1 &
        c=$!
        CLIENTS="$CLIENTS $c"
        FAULTED="$FAULTED $was"
        wait_for 20 grep -q "^faulted" "$W/$3-$i.log" || { cat "$W/$3-$i.log"; fail "client $i did not fault"; }
        wait_for 20 serves_after "$was" || fail "no new server after fault $i (in $was)"
        echo "fault $i: client $c faulted server $was; server $(server_pid) serves; $(nservers) server processes"
    done
}

# clients_done TAG: every client of the round exits 0 (its later calls failed, none hung).
clients_done() {
    local c i=0 bad=0
    for c in $CLIENTS; do
        i=$((i + 1))
        wait "$c" || { bad=1; cat "$W/$1-$i.log"; }
        grep -h "after the fault returned" "$W/$1-$i.log" | sed "s/^/  client $c: /"
    done
    [ $bad = 0 ] || fail "a client that stayed failed or hung"
}

# 1. The bound on faulted servers alive at once, and quit. (The clients would stay 30 s:
# they are stopped once the servers are gone.)
export MPSSHIM_FAULT_LINGER=60
"$CTL" -d || fail "no server"
faults 5 30 capped
first=${FAULTED# }
first=${first%% *}
c1=${CLIENTS# }
c1=${c1%% *}
nservers_le() { [ "$(nservers)" -le "$1" ]; }
wait_for 10 nservers_le 5 || fail "$(nservers) server processes after 5 faults (at most 4 faulted and the live one)"
wait_for 10 grep -q "Client process $c1 ended by this faulted server" "$LOG" ||
    fail "the oldest faulted server $first did not end its client $c1"
wait_for 10 ended "$first" || fail "the oldest faulted server $first still runs"
line=$(faulted_line)
echo "after 5 faults: $(nservers) server processes; $line"
k=$(echo "$line" | awk '{print $3}')
[ "$k" -le 4 ] 2>/dev/null || fail "get_server_status: $line"
ctl quit >/dev/null
wait_for 20 nservers_is 0 || fail "servers left after quit: $(servers | tr '\n' ' ')"
echo "quit: no server process left"
for c in $CLIENTS; do kill -KILL "$c" 2>/dev/null; wait "$c" 2>/dev/null; done

# 2. The linger: every faulted server ends its client and exits.
export MPSSHIM_FAULT_LINGER=3
"$CTL" -d || fail "no server"
faults 5 10 linger
wait_for 30 nservers_is 1 ||
    fail "$(nservers) server processes $((3 + 30)) s after the last fault (1: the live server)"
line=$(faulted_line)
echo "after the linger: $(nservers) server process ($(servers | tr '\n' ' ')); $line"
[ "$line" = "Faulted servers 0, at most 4" ] || fail "get_server_status: $line"
[ "$(servers)" = "$(server_pid)" ] || fail "the server left is not the live one"
for c in $CLIENTS; do
    grep -q "Client process $c ended by this faulted server" "$LOG" || fail "client $c was not ended"
done
clients_done linger
grep -h "after the fault returned" "$W"/linger-*.log | grep -vq "MPS_CLIENT_TERMINATED" &&
    fail "a client's later call got another error than CUDA_ERROR_MPS_CLIENT_TERMINATED"
ctl quit >/dev/null
wait_for 20 nservers_is 0 || fail "servers left after quit"
! grep -q "tables not empty\|objects left" "$LOG" || fail "tables not empty"
echo "all checks passed"
