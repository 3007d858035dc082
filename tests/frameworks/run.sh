#!/usr/bin/env bash
# Frameworks natively and through the shim (GPU tier): each script of this folder, or the
# ones named, runs twice; the two outputs (the shim's own "mpsshim:" lines aside) must be
# identical. Prints one "== framework-NAME: PASS|FAIL|SKIP" line each; logs in $LOGDIR.
# A script that exits 77 natively is SKIP (what it needs is not here: its last line says
# what); lines starting with "# " are notes (a time, say): logged, not compared.
# Usage: [FW_DIR=DIR] tests/frameworks/run.sh BUILD_DIR LOGDIR [NAME...]
# FW_DIR: the scripts' folder (tests/gpu_multi's run the same way), this one by default.
set -u
B=$(cd "${1:-build}" && pwd)
LOGDIR=${2:-/tmp}
shift 2
mkdir -p "$LOGDIR" || exit 1
HERE=${FW_DIR:-$(cd "$(dirname "$0")" && pwd)}
names=("$@")
[ ${#names[@]} = 0 ] && for f in "$HERE"/*.py; do names+=("$(basename "$f" .py)"); done
# Run alone (not from tests/gpu.sh, which names its server's directory), the first shim run
# would start a server in the default pipe directory and leave it running: a later GPU
# tier on the same machine then saw a second server on the GPU. A server of its own instead,
# quit at the end.
if [ -z "${MPSSHIM_PIPE_DIRECTORY:-}" ]; then
    FW_OWN=$(mktemp -d /tmp/mpsshim-fw.XXXXXX)
    export MPSSHIM_PIPE_DIRECTORY=$FW_OWN/pipe MPSSHIM_LOG_DIRECTORY=$FW_OWN/log
    mkdir -p "$MPSSHIM_PIPE_DIRECTORY" "$MPSSHIM_LOG_DIRECTORY"
    trap 'echo quit | timeout 30 "$B/mpsshim-control" >/dev/null 2>&1; rm -rf "$FW_OWN"' EXIT
fi
rc=0
# A program still running at FW_TIMEOUT gets SIGABRT, on which Python's faulthandler writes
# every thread's Python stack into its output (where a hang is, for the log), then SIGKILL
# 5 s later; timeout's status is 124 either way.
fw_run() { timeout -s ABRT -k 5 "${FW_TIMEOUT:-300}" "$@"; }
# shim_run OUT CMD...: CMD (a client of the shim) into OUT, as fw_run; before its SIGABRT, what
# the server says of the client (get_client_info: its host functions and the waits it holds)
# goes into OUT.hang. 124 when it ran out of time, else CMD's status.
shim_run() {
    local out=$1 pid ticks=$((${FW_TIMEOUT:-300} * 10))
    shift
    "$@" >"$out" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ "$ticks" -gt 0 ]; do
        sleep 0.1
        ticks=$((ticks - 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        printf 'get_client_info %s\n' "$pid" | timeout 20 "$B/mpsshim-control" >"$out.hang" 2>&1
        kill -ABRT "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null && sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        return 124
    fi
    wait "$pid"
}
for n in "${names[@]}"; do
    py=$HERE/$n.py
    fw_run python3 -X faulthandler "$py" >"$LOGDIR/$n-native.out" 2>&1
    nrc=$?
    if [ $nrc != 0 ] && grep -q "ModuleNotFoundError" "$LOGDIR/$n-native.out"; then
        echo "== framework-$n: SKIP (not installed)"
        continue
    fi
    if [ $nrc = 77 ]; then
        echo "== framework-$n: SKIP ($(tail -n 1 "$LOGDIR/$n-native.out"))"
        continue
    fi
    shim_run "$LOGDIR/$n-shim.out" env LD_PRELOAD="$B/libmpsshim.so" python3 -X faulthandler "$py"
    src=$?
    # PyTorch's C++ warnings carry the time ("[W1125 18:11:51.161646785 file:line]"), and
    # some a device address ("uncaptured free of a captured allocation with address
    # 0x48ea000400"), which differs between any two runs, native or not.
    warn='s/^\[W[0-9]\{4\} [0-9:.]* /[W /; /^\[W/s/0x[0-9a-f]\{6,\}/0x.../g'
    grep -v '^mpsshim: ' "$LOGDIR/$n-shim.out" | grep -v "^WARNING\|^I0000\|^W0000\|^# " |
        sed "$warn" >"$LOGDIR/$n-shim.values"
    grep -v "^WARNING\|^I0000\|^W0000\|^# " "$LOGDIR/$n-native.out" | sed "$warn" >"$LOGDIR/$n-native.values"
    if [ $nrc = 0 ] && [ $src = 0 ] && diff -q "$LOGDIR/$n-native.values" "$LOGDIR/$n-shim.values" >/dev/null; then
        echo "== framework-$n: PASS"
    else
        echo "== framework-$n: FAIL (native exit $nrc, shim exit $src)"
        diff "$LOGDIR/$n-native.values" "$LOGDIR/$n-shim.values" | head -5
        grep -m3 "mpsshim: \|Error\|error" "$LOGDIR/$n-shim.out"
        rc=1
    fi
done
exit $rc
