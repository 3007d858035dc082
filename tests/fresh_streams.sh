#!/usr/bin/env bash
# Streams taken as busy without asking the driver (server/core/waits.c, fresh: a stream given
# work within MPSSHIM_GPU_REPLY_FRESH_US, 10 us by default) must never let a synchronisation
# end early. On the CPU test driver a launch outlasts the default, so the server here takes
# the longest (1000 us): idle_answers, whose context synchronisations come right after long
# launches beside another stream's long kernel, must pass through it. With fresh streams
# taken as idle instead, its context synchronisation returned before the long kernel ended.
# Own server.
#   tests/fresh_streams.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
rc=0
export MPSSHIM_GPU_REPLY_FRESH_US=1000
own_server "$2/fresh-streams"
unset MPSSHIM_GPU_REPLY_FRESH_US
out=$(shim "$B/tests/idle_answers" 2>&1)
echo "$out"
grep -q '^PASS idle_answers' <<<"$out" || fail "idle_answers through a server of fresh streams of 1000 us"
stop_server 10 || fail "the server did not stop"
[ "$rc" = 0 ] && echo "PASS fresh_streams: idle_answers through a server taking streams 1000 us fresh as busy"
exit "$rc"
