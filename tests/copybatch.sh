#!/usr/bin/env bash
# Batched copies travel as one request per batch (interpose/memcpybatch.c): the server's
# count of requests served for a client (get_client_info, "Requests served") grows by one
# across one cuMemcpyBatchAsync of 1000 device copies, across one cuMemcpy3DBatchAsync of
# 300, and across one of 16 operations with pageable sides both ways (their bytes ride in
# the request and the reply) (tests/progs/copybatch --pause stops before and after each),
# where single copies would be as many requests as copies. Then the whole program runs
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
# requests_across WHAT N: the requests served between pause N and pause N + 1, checked to
# be one.
requests_across() {
    local before after
    before=$(served)
    echo go >&3
    wait_for 30 paused $(($2 + 1)) || fail "no pause $(($2 + 1)): $(tail -2 "$W/pause.out")"
    after=$(served)
    echo "requests served across $1: $((after - before)) ($before -> $after)"
    [ "$((after - before))" = 1 ] || fail "$1 took $((after - before)) requests"
}
requests_across "one batch of 1000 copies" 1
echo go >&3
wait_for 30 paused 3 || fail "no third pause: $(tail -2 "$W/pause.out")"
requests_across "one 3D batch of 300 copies" 3
requests_across "one 3D batch of 16 copies with pageable sides" 4
echo go >&3
exec 3>&-
wait "$P" || fail "copybatch --pause: $(tail -2 "$W/pause.out")"
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
