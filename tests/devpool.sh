#!/usr/bin/env bash
# cuMemAlloc served from the server's pool (MPSSHIM_DEVICE_POOL=1, server/devmem.c), or with
# VAR=1 from another of its allocators (MPSSHIM_DEVICE_VMM, server/arena.c), on the CPU test
# driver told to make cuMemFree wait for its whole context as the real driver does
# (MPSSHIM_CPUDRV_FREE_WAITS=1): every program of tests/progs/programs.txt through a server
# started so, the `both` ones against their direct run, exactly as the CI tier runs them on
# the default server; the server's device memory back where it was; then
# tests/progs/free_wait (one client's free while another's host function waits for it)
# passes there as natively, and fails on a default server, whose free waits.
#   tests/devpool.sh BUILD WORKDIR [VAR]
set -u
VAR=${3:-MPSSHIM_DEVICE_POOL}
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
W=$2/devpool-$VAR
mkdir -p "$W"
use_dir "$W"
export "$VAR=1" MPSSHIM_CPUDRV_FREE_WAITS=1
"$CTL" -d || exit 1
mem() { ctl get_server_status | awk '/^Device 0 memory used/ {print $5}'; }
before=$(mem)
rc=0
# The pool stays off for good (the driver refuses stream memory operations on its memory,
# devmem.c): only the programs that allocate, free and name device memory in many ways run
# through it; every program runs through the others.
[ "$VAR" = MPSSHIM_DEVICE_POOL ] &&
    export PROGRAMS_MATCH='vecadd|memcpy_all|mempool|vmm|graph_mem|capture_alloc|alloc_churn|multigpu|graph_nodes'
programs_through_server "the $VAR=1 server" "$W" || rc=1
unset PROGRAMS_MATCH
n=$PROGRAMS_RUN
# The last frees run in stream order after their clients left: given a moment.
mem_back() { [ "$(mem)" = "$before" ]; }
wait_for 10 mem_back || { echo "FAIL: device memory $before -> $(mem) bytes"; rc=1; }
if grep "releasing device memory failed\|Unmapping .* failed" "$W/log/server.log"; then rc=1; fi
grep -q "cuMemAlloc is served from the server's .* ($VAR=1)" "$W/log/server.log" ||
    { echo "FAIL: the server does not say it took $VAR=1"; rc=1; }
F=$B/tests/free_wait
timeout 60 env LD_LIBRARY_PATH="$B/cpudrv" "$F" >"$W/free_wait.direct" 2>&1 ||
    { echo "FAIL: free_wait natively: $(tail -n 1 "$W/free_wait.direct")"; rc=1; }
timeout 60 env LD_PRELOAD="$SHIM" "$F" >"$W/free_wait.shim" 2>&1
diff -u "$W/free_wait.direct" "$W/free_wait.shim" || { echo "FAIL: free_wait differs"; rc=1; }
ctl quit >/dev/null
wait_for 10 gone "$(server_pid)" 2>/dev/null
unset "$VAR"
"$CTL" -d || exit 1
if timeout 60 env LD_PRELOAD="$SHIM" "$F" >"$W/free_wait.default" 2>&1; then
    echo "FAIL: free_wait passed on a default server: the test no longer sees the wait"
    rc=1
else
    echo "as expected on a default server: $(grep FAIL "$W/free_wait.default")"
fi
ctl quit >/dev/null
[ $rc = 0 ] && echo "PASS devpool: $n runs through a server with $VAR=1"
exit $rc
