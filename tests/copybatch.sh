#!/usr/bin/env bash
# Batched copies travel as one request per batch (interpose/memcpybatch.c): the server's
# count of requests served for a client (get_client_info, "Requests served") grows by one
# across one cuMemcpyBatchAsync of 1000 device copies (tests/progs/copybatch --pause stops
# before and after it), where 1000 single copies would be 1000. Then the whole program runs
# through this server, and the server holds nothing of it once it left.
#   tests/copybatch.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
real_driver_if_gpu
own_server "$2/copybatch"
mkfifo "$W/in"
env LD_PRELOAD="$SHIM" "$B/tests/copybatch" --pause <"$W/in" >"$W/pause.out" 2>&1 &
P=$!
exec 3>"$W/in"
served() { ctl "get_client_info $P" | awk '/Requests served/ {print $3}'; }
paused() { [ "$(grep -c '^pause' "$W/pause.out")" -ge "$1" ]; }
wait_for 30 paused 1 || fail "no first pause: $(tail -2 "$W/pause.out")"
before=$(served)
echo go >&3
wait_for 30 paused 2 || fail "no second pause: $(tail -2 "$W/pause.out")"
after=$(served)
echo go >&3
exec 3>&-
wait "$P" || fail "copybatch --pause: $(tail -2 "$W/pause.out")"
echo "requests served across one batch of 1000 copies: $((after - before)) ($before -> $after)"
[ "$((after - before))" = 1 ] || fail "a batch of 1000 copies took $((after - before)) requests"
env LD_PRELOAD="$SHIM" "$B/tests/copybatch" >"$W/full.out" 2>&1 || fail "copybatch: $(tail -2 "$W/full.out")"
wait_for 30 no_clients || fail "the client was not released"
objs=$(server_objects)
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
grep -q 'tables not empty' "$W/log/server.log" && fail "tables not empty after a client left"
if ! stop_server 10; then
    fail "the server did not quit"
    kill -9 "$S" 2>/dev/null # a stuck server must not outlive the test
fi
[ $rc = 0 ] && echo "PASS one request per batch of copies"
exit $rc
