#!/usr/bin/env bash
# A client killed (SIGKILL) while it holds objects, on the server of MPSSHIM_PIPE_DIRECTORY:
# started through the shim, killed once it printed `ready`; the server must let it go
# (`disconnected` in its log, then no clients), log what it released (matching PATTERN when
# given), and say nothing of objects left, counters not zero, tables not empty or a release
# that failed, for that client.
#   tests/kill_held.sh BUILD LOG [--released PATTERN] PROGRAM ARGS...
set -u
B=$(cd "$1" && pwd)
log=$2
shift 2
pattern=
if [ "${1:-}" = --released ]; then
    pattern=$2
    shift 2
fi
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
slog=$MPSSHIM_LOG_DIRECTORY/server.log
env LD_PRELOAD="$SHIM" "$B/tests/$1" "${@:2}" >"$log" 2>&1 &
h=$!
ready() { grep -q ready "$log"; }
wait_for 10 ready
cat "$log"
ready || { echo "FAIL: $1 never got ready"; kill -9 $h; exit 1; }
kill -9 $h
wait $h 2>/dev/null
gone() { grep -q "Client process $h disconnected" "$slog"; }
wait_for 10 gone || { echo "FAIL: the server never let $1 ($h) go"; exit 1; }
wait_for 10 no_clients || { echo "FAIL: clients left: $(ctl get_server_status)"; exit 1; }
released=$(grep "Client process $h: released" "$slog")
echo "$released"
[ -n "$released" ] || { echo "FAIL: nothing released for $h"; exit 1; }
if [ -n "$pattern" ] && ! grep -q -- "$pattern" <<<"$released"; then
    echo "FAIL: the release does not name $pattern"
    exit 1
fi
if grep "Client process $h" "$slog" |
    grep "objects left\|counters not zero\|tables not empty\|releasing a .* failed"; then
    echo "FAIL: the release of $h was not clean"
    exit 1
fi
exit 0
