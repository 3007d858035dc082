#!/usr/bin/env bash
# Limits a departed client raised stay while other clients run (server/core/context.c,
# srv_limits_settle), and go back once no client is left (srv_limits_idle): lowering the
# stack size limit under another client's work faulted the shared context on two H200s
# (`contexts`, which raises CU_LIMIT_STACK_SIZE with cuCtxSetLimit, leaving beside
# `multithread`: CUDA_ERROR_LAUNCH_FAILED in 15 rounds of 15, 2026-11-30). Through one server:
# 1. while `hold` stays connected, `contexts` raises the stack limit to 4096 and leaves; a
#    client that comes next (`stack_limit`, which never sets it) reads the raised limit; once
#    no client is left the server sets it back, and the next client reads the start value;
# 2. ROUNDS rounds of two `contexts` beside one `multithread`: every program passes, the
#    server sees no fault, and each limit it sets back is set back while no client is
#    connected (the log's "New client" and "disconnected" lines counted).
#   tests/limits_load.sh BUILD WORKDIR [gpu] [ROUNDS]
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
[ "${3:-}" = gpu ] && real_driver_if_gpu
ROUNDS=${4:-3}
own_dir "$2/limits-load"
"$CTL" -d || exit 1
LOG=$MPSSHIM_LOG_DIRECTORY/server.log
limit_read() { grep "^stack limit" "$1" | awk '{print $6 + 0}'; }
shim "$B/tests/stack_limit" >"$W/start.out" 2>&1 || fail "stack_limit: $(tail -n 1 "$W/start.out")"
start=$(limit_read "$W/start.out")
env LD_PRELOAD="$SHIM" "$B/tests/hold" 60 >"$W/hold.out" 2>&1 &
hold=$!
wait_for 20 grep -q "^ready" "$W/hold.out" || fail "hold never got ready"
env LD_PRELOAD="$SHIM" "$B/tests/contexts" >"$W/contexts.out" 2>&1 &
ctx=$!
wait "$ctx" || fail "contexts: $(grep -m1 '^FAIL' "$W/contexts.out")"
# Its release done (the line comes after it) before the next client reads the limit.
wait_for 10 grep -q "Client process $ctx disconnected" "$LOG" || fail "contexts never released"
shim "$B/tests/stack_limit" >"$W/kept.out" 2>&1 || fail "stack_limit: $(tail -n 1 "$W/kept.out")"
kept=$(limit_read "$W/kept.out")
[ "$kept" = 4096 ] || fail "with hold connected, the stack limit contexts raised to 4096 reads $kept (it started at $start)"
kill "$hold"
wait "$hold" 2>/dev/null
said() { grep -q "set back to $start now that no client is left" "$LOG"; }
wait_for 10 said || fail "the stack limit not set back once no client was left: $(grep 'set back' "$LOG")"
shim "$B/tests/stack_limit" >"$W/back.out" 2>&1 || fail "stack_limit: $(tail -n 1 "$W/back.out")"
back=$(limit_read "$W/back.out")
[ "$back" = "$start" ] || fail "once no client was left, the stack limit reads $back, not $start"
[ "$kept" = 4096 ] && [ "$back" = "$start" ] &&
    echo "ok: the stack limit a departed client raised stayed $kept while another client was connected, and was $back again once none was"
for i in $(seq "$ROUNDS"); do
    env LD_PRELOAD="$SHIM" "$B/tests/contexts" >"$W/contexts-a$i.out" 2>&1 &
    a=$!
    env LD_PRELOAD="$SHIM" "$B/tests/multithread" >"$W/multithread$i.out" 2>&1 &
    m=$!
    env LD_PRELOAD="$SHIM" "$B/tests/contexts" >"$W/contexts-b$i.out" 2>&1 &
    b=$!
    wait "$a" || fail "round $i: contexts: $(grep -m1 '^FAIL' "$W/contexts-a$i.out")"
    wait "$m" || fail "round $i: multithread: $(grep -m1 '^FAIL' "$W/multithread$i.out")"
    wait "$b" || fail "round $i: contexts: $(grep -m1 '^FAIL' "$W/contexts-b$i.out")"
done
grep -q "in the shared context; it is dead" "$LOG" && fail "the shared context faulted: $(grep -m1 'it is dead' "$LOG")"
said() { grep -q "set back to .* now that no client is left" "$LOG"; }
wait_for 5 said || fail "no limit set back once the clients had left: $(grep -c 'New client' "$LOG") clients"
early=$(awk '/\] New client [0-9]+ connected/ {n++} /\] Client process [0-9]+ disconnected$/ {n--}
    /set back to .* now that no client is left/ && n > 0 {print; exit}' "$LOG")
[ -z "$early" ] || fail "a limit set back while clients were connected: $early"
ctl quit >/dev/null 2>&1
[ "${rc:-0}" = 0 ] && echo "PASS $ROUNDS rounds of contexts beside multithread: no fault; limits set back with no client left ($(grep -c 'set back to' "$LOG") times)"
exit "${rc:-0}"
