#!/usr/bin/env bash
# Back-pressure on queued work (server/core/queue.c), on the CPU test driver: two clients flood
# the server with asynchronous work behind long kernels while a bystander runs; the
# server's resident memory must stay under a bound set by MPSSHIM_QUEUE_LIMIT (without one,
# two floods of copies took it to 806 MB), the bystander and the flooders must pass, and work
# that waits on a later call of its own client must not wait for the bound. No timing is
# asserted, only completion under the generous timeouts here. Own server.
#   tests/flood.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
W=$2/flood
mkdir -p "$W"
use_dir "$W"
LIMIT_MB=16
MPSSHIM_QUEUE_LIMIT=${LIMIT_MB}M "$CTL" -d || exit 1
pid=$(server_pid)
rc=0
shim "$B/tests/vecadd" 1000 >"$W/warm.log" 2>&1 || { cat "$W/warm.log"; rc=1; }
base=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")

timeout 300 env LD_PRELOAD="$SHIM" "$B/tests/flood" 20000 --kind copy >"$W/flood1.log" 2>&1 & f1=$!
timeout 300 env LD_PRELOAD="$SHIM" "$B/tests/flood" 20000 >"$W/flood2.log" 2>&1 & f2=$!
# The bystander: its calls complete while the flooders wait for their own work.
timeout 120 bash -c '
    for i in 1 2 3; do
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/smallkern 2000 || exit 1
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/vecadd 100000 || exit 1
    done' >"$W/bystander.log" 2>&1 & by=$!
wait $by || { echo "bystander failed"; tail -n 5 "$W/bystander.log"; rc=1; }
wait $f1 || { echo "flooder 1 failed"; tail -n 5 "$W/flood1.log"; rc=1; }
wait $f2 || { echo "flooder 2 failed"; tail -n 5 "$W/flood2.log"; rc=1; }
grep -h "^PASS\|^FAIL" "$W/flood1.log" "$W/flood2.log" "$W/bystander.log"
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
# Each flooder holds at most the limit plus one mark's worth and a request; the CPU test
# driver's own record of each queued operation (a few hundred bytes) comes on top.
bound=$((base + (2 * LIMIT_MB + 32) * 1024))
echo "server resident: ${base} kB before, peak ${hwm} kB; bound ${bound} kB (2 x ${LIMIT_MB} MiB + 32 MiB)"
[ "$hwm" -le "$bound" ] || { echo "the server grew past the bound"; rc=1; }
grep -q "its queued work holds more than MPSSHIM_QUEUE_LIMIT" "$W/log/server.log" ||
    { echo "no client was held back"; rc=1; }

# Copies queued behind a wait the client satisfies later (more than the limit, less than
# four times it): the worker must take the call that satisfies it.
for m in "--wait-value 40" "--wait-host 40"; do
    # shellcheck disable=SC2086
    timeout 60 env LD_PRELOAD="$SHIM" "$B/tests/flood" $m >"$W/wait.log" 2>&1 ||
        { echo "flood $m failed"; cat "$W/wait.log"; rc=1; }
    tail -n 1 "$W/wait.log"
done
grep "Client process" "$W/log/server.log" | grep "queued work\|waited for" | sed 's/^\[[^]]*\] //'
stop_server 10 || { echo "the server did not quit"; rc=1; }
exit $rc
