#!/usr/bin/env bash
# A client that may not start a server (MPSSHIM_AUTOSTART=0) waits for one for
# MPSSHIM_SERVER_WAIT seconds, as the Kubernetes recipe's application container does for its
# sidecar's server (ops/k8s): started a second before the server, it is served by it, not run
# on the driver directly. Without the wait it falls back at once; a malformed value is said,
# naming the variable, and not waited for.
#   tests/server_wait.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/server-wait"
env LD_PRELOAD="$SHIM" MPSSHIM_AUTOSTART=0 MPSSHIM_SERVER_WAIT=20 "$B/tests/vecadd" 100000 \
    >"$W/waited.out" 2>&1 &
c=$!
sleep 1
"$CTL" -d || fail "no server"
wait "$c" || fail "the waiting client failed: $(tail -n 2 "$W/waited.out")"
grep -q "running directly on the CUDA driver" "$W/waited.out" && fail "the waiting client fell back"
grep -q "New client $c connected" "$W/log/server.log" || fail "the server never saw client $c"
stop_server 10 || fail "the server did not quit"
# No server and no wait: straight to the driver. A bad value: said, then the same.
for v in "" abc -1 3601; do
    out=$(env LD_PRELOAD="$SHIM" MPSSHIM_AUTOSTART=0 MPSSHIM_SERVER_WAIT="$v" \
        "$B/tests/vecadd" 1000 2>&1) || fail "MPSSHIM_SERVER_WAIT='$v': the client failed: $out"
    echo "$out" | grep -q "running directly on the CUDA driver" ||
        fail "MPSSHIM_SERVER_WAIT='$v': no fallback: $out"
    if [ -n "$v" ]; then
        echo "$out" | grep -q "MPSSHIM_SERVER_WAIT=$v is not a whole number of seconds" ||
            fail "MPSSHIM_SERVER_WAIT='$v' was not said to be malformed: $out"
    fi
done
[ $rc = 0 ] && echo "PASS a client waited for its server; bad values said and not waited for"
exit $rc
