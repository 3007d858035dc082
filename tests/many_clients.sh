#!/usr/bin/env bash
# Many clients at once (issue 30; CI tier, CPU test driver, servers of its own):
# 1. a server with the default client limit (worked out at start: server/core/capacity.c)
#    says it in get_server_status, and serves 256 idle clients (tests/progs/hold) at once,
#    with a few working ones (tests/progs/smallkern) beside them: every one served and
#    correct, and nothing held once they are gone;
# 2. a server with MPSSHIM_MAX_CLIENTS=3 refuses the fourth client with
#    CUDA_ERROR_MPS_MAX_CLIENTS_REACHED and a one-line message naming the limit and the
#    setting, logged once, and the client does not fall back to the driver;
# 3. a server out of descriptors (a small RLIMIT_NOFILE, MPSSHIM_MAX_CLIENTS above it)
#    refuses the next clients the same way, the message naming descriptors, turns control
#    connections away saying so, and serves again once clients leave.
# Where this machine sustains fewer than 256 (+ the working ones) by default, part 1 runs as
# many as it does and says so. bench/clients.sh measures the same at other counts.
# usage: many_clients.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
BASE=$2/many_clients
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
export MPSSHIM_AUTOSTART=0
unset MPSSHIM_MAX_CLIENTS
IDLE=256
WORKING=4
declare -a PIDS=()
fail() {
    echo "FAIL: $*"
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    ctl quit >/dev/null 2>&1
    exit 1
}
# ready DIR: how many of DIR's outputs say "ready"; all_ready DIR N: at least N do.
ready() { grep -l '^ready' "$1"/*.out 2>/dev/null | wc -l; }
all_ready() { [ "$(ready "$1")" -ge "$2" ]; }
clients() { ctl get_server_status | awk '/^Clients/ {print $2}'; }

# ---------------------------------------------------------------- 1. default limit
own_server "$BASE/default" # W is that directory from here on
limit=$(ctl get_server_status | awk '/^Client limit/ {print $3}')
ctl get_server_status | grep '^Client limit'
[ -n "$limit" ] || fail "get_server_status shows no client limit"
grep -q "Up to $limit clients at once" "$W/log/server.log" || fail "the log does not say the limit"
if [ "$limit" -lt $((IDLE + WORKING)) ]; then
    IDLE=$((limit > WORKING ? limit - WORKING : 1))
    echo "this machine sustains $limit clients by default: $IDLE idle ones"
fi
mkdir -p "$W/idle" "$W/working"
t0=$SECONDS
for i in $(seq "$IDLE"); do
    env LD_PRELOAD="$SHIM" "$B/tests/hold" 600 >"$W/idle/$i.out" 2>&1 &
    PIDS+=($!)
done
wait_for 120 all_ready "$W/idle" "$IDLE" ||
    fail "$(ready "$W/idle") of $IDLE idle clients ready after 120 s: $(grep -hv '^ready' "$W"/idle/*.out | sort | uniq -c | head -n 3)"
echo "$IDLE idle clients served in $((SECONDS - t0)) s"
work=()
for i in $(seq "$WORKING"); do
    env LD_PRELOAD="$SHIM" "$B/tests/smallkern" 200 >"$W/working/$i.out" 2>&1 &
    work+=($!)
done
# Counted while the working ones run: every idle one still connected beside them.
n=$(clients)
[ "$n" -ge "$IDLE" ] || fail "the server has $n clients, $IDLE idle ones connected"
for p in "${work[@]}"; do wait "$p" || fail "a working client failed: $(cat "$W"/working/*.out | grep -m1 FAIL)"; done
[ "$(grep -l '^PASS' "$W"/working/*.out | wc -l)" = "$WORKING" ] || fail "not every working client passed"
grep -q "running directly" "$W"/idle/*.out "$W"/working/*.out && fail "a client fell back to the driver"
echo "$WORKING working clients passed beside them ($n clients at once)"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
wait_for 60 no_clients || fail "$(clients) clients still held 60 s after they left"
[ "$(server_objects)" = "0 0" ] || fail "the server still holds $(server_objects) objects"
grep -q "Refused a client" "$W/log/server.log" && fail "a client was refused: $(grep -m1 'Refused' "$W/log/server.log")"
stop_server 30 || fail "the server did not quit"
grep -q "tables not empty" "$W/log/server.log" && fail "tables not empty after a client left"

# ---------------------------------------------------------------- 2. past a small limit
own_dir "$BASE/small"
MPSSHIM_MAX_CLIENTS=3 "$CTL" -d || fail "no server with MPSSHIM_MAX_CLIENTS=3"
mkdir -p "$W/out"
for i in 1 2 3; do
    env LD_PRELOAD="$SHIM" "$B/tests/hold" 600 >"$W/out/$i.out" 2>&1 &
    PIDS+=($!)
done
wait_for 60 all_ready "$W/out" 3 || fail "3 clients not served under a limit of 3"
out=$(shim "$B/tests/vecadd" 1000 2>&1) && fail "the fourth client ran: $out"
grep -q 'CUDA_ERROR_MPS_MAX_CLIENTS_REACHED' <<<"$out" || fail "the fourth client's error: $out"
msg=$(grep '^mpsshim: server refused this client: ' <<<"$out")
if [ "$(wc -l <<<"$msg")" != 1 ] || ! grep -q 'already has 3 clients.*MPSSHIM_MAX_CLIENTS=3' <<<"$msg"; then
    fail "the refusal's message: $out"
fi
grep -q "running directly" <<<"$out" && fail "the refused client fell back to the driver: $out"
[ "$(grep -c 'Refused a client: .*already has 3 clients' "$W/log/server.log")" = 1 ] ||
    fail "the refusal is not logged once: $(grep Refused "$W/log/server.log")"
echo "the fourth client refused: ${msg#mpsshim: }"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
wait_for 60 no_clients || fail "clients still held after they left"
stop_server 30 || fail "the server did not quit"

# ---------------------------------------------------------------- 3. out of descriptors
# A server whose RLIMIT_NOFILE (soft and hard: it raises the soft one) runs out before its
# client limit: clients one by one until one is refused (its segment's memfd, client.c);
# then, while a connection that says nothing holds the last descriptor in its handshake, a
# burst at once (the accept itself, server/control/admit.c): each refused as past the client limit, its
# message naming descriptors, none run on the driver; and a control command turned away.
own_dir "$BASE/nofile"
(ulimit -n 40 && MPSSHIM_MAX_CLIENTS=1000 "$CTL" -d) || fail "no server with RLIMIT_NOFILE 40"
# Its standby starts there too (its socket was once dup'ed above 64, past such a limit: EINVAL).
standby_ready() { grep -q "Standby server [0-9]* ready to take over" "$W/log/server.log"; }
wait_for 20 standby_ready ||
    fail "no standby under RLIMIT_NOFILE 40: $(grep -i standby "$W/log/server.log" | tail -n 2)"
mkdir -p "$W/out"
settled() { grep -q '^ready' "$1" 2>/dev/null || gone "$2"; }
held=0
for i in $(seq 100); do
    env LD_PRELOAD="$SHIM" "$B/tests/hold" 600 >"$W/out/$i.out" 2>&1 &
    PIDS+=($!)
    wait_for 30 settled "$W/out/$i.out" $! || fail "client $i neither ready nor gone in 30 s"
    grep -q '^ready' "$W/out/$i.out" || break
    held=$i
done
[ "$held" -lt 100 ] || fail "100 clients served under RLIMIT_NOFILE 40"
refused() {
    grep -q 'CUDA_ERROR_MPS_MAX_CLIENTS_REACHED' "$1" &&
        [ "$(grep -c '^mpsshim: server refused this client: .*the server has no descriptors left (RLIMIT_NOFILE 40)' "$1")" = 1 ] &&
        ! grep -q "running directly" "$1"
}
refused "$W/out/$((held + 1)).out" || fail "client $((held + 1)), past $held: $(cat "$W/out/$((held + 1)).out")"
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
time.sleep(60)' "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" &
silent=$!
PIDS+=("$silent")
# Taken once the server has all 40 open (it gives up on it 5 s after, client.c SRV_HELLO_NS).
S=$(server_pid)
fds() { find "/proc/$S/fd" -mindepth 1 -maxdepth 1 | wc -l; }
fds_full() { [ "$(fds)" -ge 40 ]; }
wait_for 5 fds_full || fail "the server has $(fds) descriptors open, not 40"
# A control connection then is turned away with the reason, not left waiting.
out=$(ctl get_server_status 2>&1) && fail "a control command was served out of descriptors: $out"
grep -q '^Not served: the server has no descriptors left (RLIMIT_NOFILE 40)' <<<"$out" ||
    fail "the control command's answer out of descriptors: $out"
burst=()
for i in 1 2 3 4; do
    env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 1000 >"$W/out/burst$i.out" 2>&1 &
    burst+=($!)
done
for i in 1 2 3 4; do
    wait "${burst[$((i - 1))]}" && fail "burst client $i ran: $(cat "$W/out/burst$i.out")"
    refused "$W/out/burst$i.out" || fail "burst client $i: $(cat "$W/out/burst$i.out")"
done
kill "$silent"
wait "$silent" 2>/dev/null
[ "$(grep -c 'Out of file descriptors with .* clients (RLIMIT_NOFILE 40): new clients are refused' "$W/log/server.log")" = 1 ] ||
    fail "the full accept is not logged once: $(grep 'Out of file' "$W/log/server.log")"
echo "past $held clients under RLIMIT_NOFILE 40, refused: $(grep -h -m1 -o 'the server has no.*)' "$W/out/burst1.out")"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
wait_for 60 no_clients || fail "clients still held after they left"
out=$(shim "$B/tests/vecadd" 1000 2>&1) || fail "no client served once the others left: $out"
grep -q "running directly" <<<"$out" && fail "the client after them ran on the driver: $out"
stop_server 30 || fail "the server did not quit"
grep -q "tables not empty" "$W/log/server.log" && fail "tables not empty after a client left"
echo "PASS $IDLE idle and $WORKING working clients at once under the default limit ($limit); the fourth past a limit of 3 refused; past RLIMIT_NOFILE refused as past the limit"
