#!/usr/bin/env bash
# Runs a reproducer of fuzz_server's findings (tests/fuzz/repro_NAME.c) against a server of
# BUILD over the CPU test driver: exit 0 when the server behaves (the finding is fixed), 1
# while it does not. `control` runs the same steps in the form the shim sends (passes).
# Usage: [SERVER=PATH] bash tests/fuzz/repro.sh BUILD_DIR NAME [ARGS...] [control]
#   NAME: hostfn_seq, waitvalue, waitfree (ARGS: ctx or free), priority
#   SERVER: the server to run (default BUILD_DIR/mpsshim-server; tests/asan.sh builds a
#   sanitized one in BUILD_DIR-asan)
set -u
B=$(cd "${1:-build}" && pwd)
NAME=${2:?NAME}
shift 2
W=$(mktemp -d /tmp/mpsshim-repro.XXXXXX)
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log MPSSHIM_AUTOSTART=0 \
    MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1 MPSSHIM_RELEASE_TIMEOUT=3
mkdir -p "$W/pipe" && chmod 700 "$W/pipe"
"${SERVER:-$B/mpsshim-server}" 2>"$W/server.err" &
srv=$!
for _ in $(seq 100); do [ -S "$W/pipe/mpsshim.sock" ] && break; sleep 0.1; done
"$B/fuzz/repro_$NAME" "$B/tests" "$@"
rc=$?
grep -h "still running\|waits until no client" "$W/log/server.log" | sed 's/^/server.log: /'
grep -h "runtime error\|AddressSanitizer" "$W/server.err" | sed 's/^/server stderr: /'
printf "quit\n" | timeout 20 "$B/mpsshim-control" >/dev/null 2>&1
for _ in $(seq 50); do kill -0 "$srv" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$srv" 2>/dev/null; then
    echo "the server did not quit within 10 s (a worker stuck for good): killed"
    kill -9 "$srv"
fi
wait "$srv" 2>/dev/null
rm -rf "$W"
exit $rc
