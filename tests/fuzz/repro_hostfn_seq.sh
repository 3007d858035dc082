#!/usr/bin/env bash
# Runs tests/fuzz/repro_hostfn_seq.c against a server of BUILD over the CPU test driver (see
# that file): exit 0 when a departed client's out-of-order host functions no longer hold up
# another client's module load, 1 while they do.
# Usage: bash tests/fuzz/repro_hostfn_seq.sh BUILD_DIR [in-order]
set -u
B=$(cd "${1:-build}" && pwd)
W=$(mktemp -d /tmp/mpsshim-repro.XXXXXX)
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log MPSSHIM_AUTOSTART=0 \
    MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1 MPSSHIM_RELEASE_TIMEOUT=3
mkdir -p "$W/pipe" && chmod 700 "$W/pipe"
"$B/mpsshim-server" 2>"$W/server.err" &
srv=$!
for _ in $(seq 100); do [ -S "$W/pipe/mpsshim.sock" ] && break; sleep 0.1; done
"$B/fuzz/repro_hostfn_seq" "$B/tests" ${2:+"$2"}
rc=$?
grep -h "still running\|waits until no client" "$W/log/server.log" | sed 's/^/server.log: /'
printf "quit\n" | timeout 20 "$B/mpsshim-control" >/dev/null 2>&1
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
rm -rf "$W"
exit $rc
