#!/usr/bin/env bash
# Hostile peers of the control socket and hostile names (issue 34, S7 and S8), against
# servers of its own on the CPU test driver (tests/ci.sh runs it: bash
# tests/control_hostile.sh BUILD_DIR):
# - a crowd of 40 idle control connections: operators still get answers, terminate_client
#   still works, and each connection closed to make room was told why;
# - a control connection idle for MPSSHIM_CONTROL_IDLE seconds is told so and closed, no
#   longer holds the idle server's fresh start off, and an interactive mpsshim-control
#   session idle that long still answers its next command;
# - a client whose executable's name, and another whose environment, hold a newline, a
#   terminal escape and an end-of-answer byte: every log line is the server's own, and
#   the control answers stay one line per client and in step.
# Each check prints "ok NAME" or "FAIL NAME: what was seen"; exits 1 if any failed.
# Waits poll for a state with a bound; nothing asserts how long anything took.
set -u
B=$(cd "${1:-build}" && pwd)
W=$(mktemp -d /tmp/mpsshim-ctlhostile.XXXXXX)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
export MPSSHIM_AUTOSTART=0
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY MPSSHIM_ACTIVE_THREAD_PERCENTAGE \
    MPSSHIM_PINNED_DEVICE_MEM_LIMIT MPSSHIM_CLIENT_PRIORITY MPSSHIM_MAX_CLIENTS \
    MPSSHIM_CONTROL_IDLE MPSSHIM_RECYCLE_IDLE
# shellcheck source=tests/checks.sh
. "$(dirname "$0")/checks.sh"

# hold_control SOCKET READY STOP N [COMMAND]: opens N control connections (sending COMMAND
# on each first, and reading its answer, when given), touches READY, and holds them silent
# until STOP exists (at most 120 s); then prints "told T silent U open O": how many
# connections the server closed with a line saying why (a CAN byte first), how many it
# closed without a word, how many it kept open.
hold_control() {
    python3 - "$@" <<'EOF'
import os, socket, sys, time
path, ready, stop, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
command = sys.argv[5] if len(sys.argv) > 5 else None
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    if command:
        s.sendall(command.encode() + b"\n")
        got = b""
        while b"\x04" not in got:
            got += s.recv(4096)
    held.append(s)
open(ready, "w").close()
end = time.time() + 120
while not os.path.exists(stop) and time.time() < end:
    time.sleep(0.1)
told = silent = still = 0
for s in held:
    s.setblocking(False)
    try:
        got = s.recv(4096)
    except BlockingIOError:
        still += 1
        continue
    except ConnectionResetError:
        got = b""
    if got.startswith(b"\x18"):
        told += 1
        sys.stderr.write(got[1:].decode(errors="replace"))
    else:
        silent += 1
print("told %d silent %d open %d" % (told, silent, still))
EOF
}

LOGRE='\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}'

# ---------------------------------------------------------------- a crowd of idle connections
use_dir "$W/crowd"
"$CTL" -d || { bad crowd-start "mpsshim-control -d failed"; exit 1; }
S=$(server_pid)
spawn H "$W/hold.log" "$B/tests/hold" 600
until_true grep -q ready "$W/hold.log" || bad hold-ready "$(cat "$W/hold.log")"
hold_control "$MPSSHIM_PIPE_DIRECTORY/control.sock" "$W/crowd.ready" "$W/crowd.stop" 40 \
    >"$W/crowd.out" 2>"$W/crowd.err" &
crowd=$!
until_true test -e "$W/crowd.ready" || bad crowd-ready "$(cat "$W/crowd.err")"
out=$(ctl get_server_status)
rc=$?
has crowd-get_server_status "$out" "^Server $S\$"
has crowd-get_server_status-clients "$out" '^Clients 1$'
check crowd-get_server_status-exit "$rc" 0
check crowd-session "$(ctl get_server_list "get_client_list $S")" "$(printf '%s\n%s' "$S" "$H")"
check crowd-terminate_client "$(ctl "terminate_client $S $H")" 0
touch "$W/crowd.stop"
wait "$crowd"
cat "$W/crowd.err"
read -r _ told _ silent _ still <"$W/crowd.out"
# 40 against at most 32 at once: at least 8 closed (the commands' connections may close
# more), each told why.
[ "${told:-0}" -ge 8 ] && [ "${silent:-1}" = 0 ] && [ "$((told + still))" = 40 ] &&
    ok crowd-told-why || bad crowd-told-why "$(cat "$W/crowd.out")"
has crowd-told-line "$(cat "$W/crowd.err")" '^Closed: .*idle the longest; connect again$'
has crowd-logged "$(cat "$MPSSHIM_LOG_DIRECTORY/control.log")" \
    'Closed the control connection of process [0-9]+ \(idle for [0-9]+ ms\) for one of process [0-9]+'
stop_server 30 || bad crowd-quit "server still running"

# ---------------------------------------------------------------- idle connections time out
# A connection idle for MPSSHIM_CONTROL_IDLE seconds is told so and closed: then it no
# longer holds off the fresh start of a server idle after serving a client (recycle.c).
use_dir "$W/idle"
MPSSHIM_CONTROL_IDLE=1 MPSSHIM_RECYCLE_IDLE=1 "$CTL" -d || { bad idle-start "-d failed"; exit 1; }
S=$(server_pid)
L=$MPSSHIM_LOG_DIRECTORY
hold_control "$MPSSHIM_PIPE_DIRECTORY/control.sock" "$W/idle.ready" "$W/idle.stop" 1 \
    get_server_list >"$W/idle.out" 2>"$W/idle.err" &
idler=$!
until_true test -e "$W/idle.ready" || bad idle-ready "$(cat "$W/idle.err")"
out=$(shim "$B/tests/vecadd" 1000 2>&1)
has idle-client-served "$out" '^PASS vecadd'
until_true grep -q 'Started afresh' "$L/server.log" && ok idle-fresh-start ||
    bad idle-fresh-start "no fresh start with an idle control connection open: $(tail -n 3 "$L/server.log")"
touch "$W/idle.stop"
wait "$idler"
check idle-told "$(cat "$W/idle.out")" "told 1 silent 0 open 0"
has idle-told-line "$(cat "$W/idle.err")" '^Closed: this control connection was idle for MPSSHIM_CONTROL_IDLE seconds; connect again$'
has idle-logged "$(cat "$L/control.log")" 'Closed the control connection of process [0-9]+: idle for [0-9]+ s$'
# An interactive session idle that long answers its next command all the same
# (mpsshim-control connects again when the server says it closed the connection).
before=$(grep -c 'idle for' "$L/control.log")
out=$({
    echo get_server_list
    wait_for 30 bash -c '[ "$(grep -c "idle for" "$1")" -gt "$2" ]' _ "$L/control.log" "$before"
    echo get_server_list
} | "$CTL" 2>&1)
rc=$?
check idle-session-answers "$out" "$(printf '%s\n%s' "$S" "$S")"
check idle-session-exit "$rc" 0
[ "$(grep -c 'idle for' "$L/control.log")" -gt "$before" ] && ok idle-session-was-closed ||
    bad idle-session-was-closed "the session was not closed for idleness: $(tail -n 3 "$L/control.log")"
stop_server 30 || bad idle-quit "server still running"

# ---------------------------------------------------------------- hostile names and values
use_dir "$W/names"
"$CTL" -d || { bad names-start "-d failed"; exit 1; }
S=$(server_pid)
L=$MPSSHIM_LOG_DIRECTORY
FORGED='[2099-01-01 00:00:00.000 Server 1] forged'
EVIL=$'x\n'"$FORGED"$' \e[31m\x04red'
mkdir -p "$W/bin"
cp "$B/tests/hold" "$W/bin/$EVIL"
spawn E "$W/evil.log" "$W/bin/$EVIL" 600
until_true grep -q ready "$W/evil.log" || bad evil-ready "$(cat "$W/evil.log")"
# An environment value the server logs as it refuses the client.
env LD_PRELOAD="$SHIM" MPSSHIM_PINNED_DEVICE_MEM_LIMIT=$'0=1G\n'"$FORGED too" \
    "$B/tests/vecadd" 1000 >"$W/evil-env.log" 2>&1
until_true grep -q 'Refused a client' "$L/server.log" ||
    bad evil-env-refused "$(cat "$W/evil-env.log")"
info=$(ctl "get_client_info $E")
check names-info-line "$(echo "$info" | head -n 1)" \
    "Client $E (x\\x0a$FORGED \\x1b[31m\\x04red)"
check names-info-lines "$(echo "$info" | wc -l)" 12 # the name, 2 devices, 8 counters, its waits
check names-client_list "$(ctl "get_client_list $S")" "$E"
ps=$(ctl ps)
check names-ps-rows "$(echo "$ps" | grep -cv '^PID ID ')" 1
has names-ps "$ps" "^$E [0-9]+ $S .* $W/bin/x\\\\x0a\\[2099.* \\\\x1b\\[31m\\\\x04red 600\$"
# UTF-8 is shown as it is, but not a byte that is no UTF-8, nor a right-to-left override;
# a backslash is doubled (the name reads back exactly).
ODD="caf"$'\xc3\xa9\xff\xe2\x80\xae'"evil\\"
cp "$B/tests/hold" "$W/bin/$ODD"
spawn O "$W/odd.log" "$W/bin/$ODD" 600
until_true grep -q ready "$W/odd.log" || bad odd-ready "$(cat "$W/odd.log")"
check names-utf8 "$(ctl "get_client_info $O" | head -n 1)" \
    "Client $O (caf"$'\xc3\xa9''\xff\xe2\x80\xaeevil\\)'
kill "$O"
# The answers stay in step: the next command's answer is its own.
check names-in-step "$(ctl "get_client_info $E" "ps" get_server_list | tail -n 1)" "$S"
stop_server 30 || bad names-quit "server still running"
for f in server.log control.log; do
    n=$(grep -Evc "^$LOGRE (Server|Control) $S\] " "$L/$f")
    check "names-$f-own-lines" "$n" 0
    [ "$n" = 0 ] || grep -Ev "^$LOGRE (Server|Control) $S\] " "$L/$f" | head -n 3 | cat -A
    check "names-$f-no-escape" "$(grep -c $'[\e\x04]' "$L/$f")" 0
done
has names-logged "$(cat "$L/server.log")" \
    "New client $E connected \\(x\\\\x0a\\[2099-01-01 00:00:00.000 Server 1\\] forged"
has names-env-logged "$(cat "$L/server.log")" \
    "Refused a client: .*PINNED_DEVICE_MEM_LIMIT=0=1G\\\\x0a\\[2099"

[ "$FAILED" = 0 ] && echo "control_hostile: all passed" || echo "control_hostile: FAILED (files in $W)"
exit "$FAILED"
