#!/usr/bin/env bash
# Client limits the server enforces: device memory limits (PINNED_DEVICE_MEM_LIMIT) and
# client priority (CLIENT_PRIORITY). Runs its own server on the CPU test driver with the
# driver's trace on, which shows the priority each stream really got. Prints one
# "== NAME: PASS|FAIL" line per check; exits 1 if any failed (logs then stay in $WORK).
# Usage: tests/limits.sh BUILD_DIR   (ci.sh runs it)
set -u
B=$(cd "${1:-build}" && pwd)
WORK=$(mktemp -d /tmp/mpsshim-limits.XXXXXX)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
use_dir "$WORK"
export MPSSHIM_AUTOSTART=0
unset MPSSHIM_PINNED_DEVICE_MEM_LIMIT CUDA_MPS_PINNED_DEVICE_MEM_LIMIT MPSSHIM_CLIENT_PRIORITY \
    CUDA_MPS_CLIENT_PRIORITY MPSSHIM_ACTIVE_THREAD_PERCENTAGE CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
PROG=$B/tests/memlimit
LOG=$MPSSHIM_LOG_DIRECTORY/server.log
TRACE=$WORK/driver-trace.log
FAILED=0

check() { # check NAME CMD...: PASS when CMD succeeds
    local name=$1
    shift
    if "$@"; then
        echo "== $name: PASS"
    else
        echo "== $name: FAIL"
        FAILED=1
    fi
}
# Priorities of the streams the driver made since trace line $1 (one per line).
prios_since() { tail -n +"$(($1 + 1))" "$TRACE" | sed -n 's/.*stream [0-9]* created with priority \(-\{0,1\}[0-9]*\)$/\1/p'; }

# The server in the foreground (its stderr is the driver's trace), in our own directory.
MPSSHIM_CPUDRV_TRACE=1 "$B/mpsshim-server" >"$WORK/server.out" 2>"$TRACE" &
SPID=$!
finish() {
    ctl quit >/dev/null 2>&1
    wait "$SPID" 2>/dev/null
    if [ "$FAILED" = 0 ]; then rm -rf "$WORK"; else echo "logs in $WORK"; fi
}
trap finish EXIT
trap "exit 1" TERM INT
for _ in $(seq 200); do
    [ -S "$MPSSHIM_PIPE_DIRECTORY/control.sock" ] && [ -s "$MPSSHIM_PIPE_DIRECTORY/server.pid" ] && break
    sleep 0.05
done
if ! ctl get_server_list >/dev/null 2>&1; then
    echo "== limits-server-start: FAIL"
    cat "$LOG" 2>/dev/null
    FAILED=1
    exit 1
fi
BASE_MEM=$(mem_used)

# A client limited to 64M on device 0 fills its limit and holds it while a client without
# a limit allocates more than that; then the limited one goes on (frees, pitched
# allocations, arrays, a context of its own) and exits holding memory.
# (env, not a shell function, so that $! is the client's pid.)
env LD_PRELOAD="$SHIM" MPSSHIM_PINNED_DEVICE_MEM_LIMIT=0=64M "$PROG" limited 64 \
    --hold "$WORK/go" >"$WORK/limited.log" 2>&1 &
LPID=$!
for _ in $(seq 600); do
    grep -q '^holding' "$WORK/limited.log" && break
    kill -0 "$LPID" 2>/dev/null || break
    sleep 0.05
done
check limited-client-holds-its-limit grep -q '^holding' "$WORK/limited.log"
shim "$PROG" unlimited 64 >"$WORK/unlimited.log" 2>&1
check unlimited-client-unaffected grep -q '^PASS memlimit' "$WORK/unlimited.log"
touch "$WORK/go"
wait "$LPID"
check memory-limit-enforced [ $? = 0 ]
check limit-reached-logged grep -q "Client process $LPID: device memory limit 64M on device 0 reached" "$LOG"
cat "$WORK/limited.log" "$WORK/unlimited.log"

# By UUID, under the MPS variable name, on device 1; device 0 stays unlimited.
UUID=$(shim "$PROG" uuid 1)
echo "device 1 is $UUID"
shim env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="$UUID=32M" "$PROG" limited 32 --device 1 \
    --others-unlimited >"$WORK/uuid.log" 2>&1
check memory-limit-by-uuid [ $? = 0 ]
cat "$WORK/uuid.log"

# The operator's default limit applies too, the lower of it and the client's winning.
ctl "set_default_device_pinned_mem_limit 0 32M"
shim env MPSSHIM_PINNED_DEVICE_MEM_LIMIT=0=64M "$PROG" limited 32 >"$WORK/operator.log" 2>&1
check operator-limit-lower-wins [ $? = 0 ]
ctl "set_default_device_pinned_mem_limit 0 0"
cat "$WORK/operator.log"

# Stream-ordered allocations captured into a graph count against the limit as graph memory
# (refused beyond it, the capture going on), for as long as the graph holds them; a capture
# that fails, or whose stream goes, gives their room back (tests/progs/capture_alloc.c).
shim env MPSSHIM_PINNED_DEVICE_MEM_LIMIT=0=64M "$B/tests/capture_alloc" --limit 64 \
    >"$WORK/capture.log" 2>&1
check memory-limit-captured-allocations [ $? = 0 ]
cat "$WORK/capture.log"

# Malformed limits: the client is refused with a message naming the variable.
for bad in "0=lots" "0" "9=1G" "0=99999999999999999999999"; do
    out=$(shim env MPSSHIM_PINNED_DEVICE_MEM_LIMIT="$bad" "$PROG" limited 64 2>&1)
    rc=$?
    echo "$out" | head -n 3
    check "malformed-limit-refused ($bad)" \
        bash -c '[ '"$rc"' != 0 ] && grep -q "PINNED_DEVICE_MEM_LIMIT=" <<<"$1"' _ "$out"
done

# Priority: the same program creates the same streams in the same order; a below-normal
# client's streams must get the same or a lower priority (a greater number) than a normal
# client's, and a lower one where the range allows. Each client sees what it asked for.
n0=$(wc -l <"$TRACE")
shim "$B/tests/streams_events" >"$WORK/prio-normal.log" 2>&1
check priority-normal-client-runs [ $? = 0 ]
n1=$(wc -l <"$TRACE")
shim env MPSSHIM_CLIENT_PRIORITY=1 "$B/tests/streams_events" >"$WORK/prio-below.log" 2>&1
check priority-below-normal-client-runs [ $? = 0 ]
normal=$(tail -n +"$((n0 + 1))" "$TRACE" | head -n "$((n1 - n0))" |
    sed -n 's/.*stream [0-9]* created with priority \(-\{0,1\}[0-9]*\)$/\1/p')
below=$(prios_since "$n1")
echo "stream priorities, normal client:       $(echo $normal)"
echo "stream priorities, below-normal client: $(echo $below)"
check below-normal-streams-lower-priority bash -c '
    read -r -a n <<<"$1"; read -r -a b <<<"$2"
    [ "${#n[@]}" -gt 0 ] && [ "${#n[@]}" = "${#b[@]}" ] || exit 1
    lower=0
    for i in "${!n[@]}"; do
        [ "${b[$i]}" -ge "${n[$i]}" ] || exit 1
        [ "${b[$i]}" -gt "${n[$i]}" ] && lower=$((lower + 1))
    done
    [ "$lower" -gt 0 ]' _ "$(echo $normal)" "$(echo $below)"

# Every client gone: what they held was released and every memory counter is back to 0.
check limits-clients-gone wait_for 10 no_clients
check memory-counters-back-to-zero bash -c '
    grep -q "Client process '"$LPID"': released" "$1" &&
        ! grep -q "device memory counters not zero" "$1" &&
        ! grep -q "tables not empty" "$1"' _ "$LOG"
check driver-memory-back-to-base [ "$(mem_used)" = "$BASE_MEM" ]
[ "$FAILED" = 0 ] || tail -n 30 "$LOG"
exit "$FAILED"
