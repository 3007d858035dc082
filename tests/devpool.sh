#!/usr/bin/env bash
# cuMemAlloc served three ways, each on a server of its own, on the CPU test driver told to
# make cuMemFree wait for its whole context as the real driver does
# (MPSSHIM_CPUDRV_FREE_WAITS=1):
#   arena   the server's arena of mapped memory (server/memory/arena.c; the default, asked for
#           here with MPSSHIM_DEVICE_VMM=1 all the same)
#   pool    the server's pool (MPSSHIM_DEVICE_POOL=1 with MPSSHIM_DEVICE_VMM=0; off for good)
#   driver  the driver's own (MPSSHIM_DEVICE_VMM=0)
# The programs of tests/progs/programs.txt that allocate, free and name device memory in
# many ways run through it, the `both` ones against their direct run (the CI tier's main
# loop runs every program on a default server, so through the arena); the server's device
# memory must be back where it was; the server must say which allocator it took. Then
# tests/progs/free_wait (one client's free while another's host function waits for it)
# passes through the arena and the pool as natively, and fails through the driver's, whose
# free waits for every client's work (so the test still sees the wait).
#   tests/devpool.sh BUILD WORKDIR [arena|pool|driver]
set -u
MODE=${3:-arena}
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
W=$2/devpool-$MODE
mkdir -p "$W"
use_dir "$W"
case $MODE in
arena) export MPSSHIM_DEVICE_VMM=1 said="served from the server's arena of mapped memory" ;;
pool)
    export MPSSHIM_DEVICE_VMM=0 MPSSHIM_DEVICE_POOL=1 said="served from the server's memory pool" ;;
driver) export MPSSHIM_DEVICE_VMM=0 said="cuMemAlloc is the driver's (MPSSHIM_DEVICE_VMM=0)" ;;
*) echo "usage: tests/devpool.sh BUILD WORKDIR [arena|pool|driver]"; exit 2 ;;
esac
export MPSSHIM_CPUDRV_FREE_WAITS=1
"$CTL" -d || exit 1
mem() { ctl get_server_status | awk '/^Device 0 memory used/ {print $5}'; }
before=$(mem)
rc=0
PROGRAMS_MATCH='vecadd|memcpy_all|mempool|vmm|vmm_ipc|graph_mem|graph_nodes|capture_alloc'
PROGRAMS_MATCH="$PROGRAMS_MATCH|alloc_churn|multigpu|ipc|isolation|isolation2|streams_events"
export PROGRAMS_MATCH="$PROGRAMS_MATCH|flood|managed|ncclish"
# Managed memory migrates only on the arena (server/memory/migrate.c); elsewhere it is host
# memory the GPU reads over the bus, which `managed --migrating` tells apart.
[ "$MODE" = arena ] || export PROGRAMS_EXCLUDE=--migrating
programs_through_server "the $MODE server" "$W" || rc=1
unset PROGRAMS_MATCH PROGRAMS_EXCLUDE
n=$PROGRAMS_RUN
# The last frees run in stream order after their clients left: given a moment.
mem_back() { [ "$(mem)" = "$before" ]; }
wait_for 10 mem_back || { echo "FAIL: device memory $before -> $(mem) bytes"; rc=1; }
if grep "releasing device memory failed\|Unmapping .* failed" "$W/log/server.log"; then rc=1; fi
grep -qF "$said" "$W/log/server.log" ||
    { echo "FAIL: the server does not say: $said"; rc=1; }
F=$B/tests/free_wait
if [ "$MODE" = driver ]; then
    if timeout 60 env LD_PRELOAD="$SHIM" "$F" >"$W/free_wait.shim" 2>&1; then
        echo "FAIL: free_wait passed with the driver's cuMemAlloc: the test no longer sees the wait"
        rc=1
    else
        echo "as expected with the driver's cuMemAlloc: $(grep FAIL "$W/free_wait.shim")"
    fi
else
    timeout 60 env LD_LIBRARY_PATH="$B/cpudrv" "$F" >"$W/free_wait.direct" 2>&1 ||
        { echo "FAIL: free_wait natively: $(tail -n 1 "$W/free_wait.direct")"; rc=1; }
    timeout 60 env LD_PRELOAD="$SHIM" "$F" >"$W/free_wait.shim" 2>&1
    diff -u "$W/free_wait.direct" "$W/free_wait.shim" || { echo "FAIL: free_wait differs"; rc=1; }
fi
ctl quit >/dev/null
wait_for 10 gone "$(server_pid)" 2>/dev/null
if [ "$MODE" = driver ]; then
    # A default server on a device without the virtual memory calls (some GPUs and drivers):
    # its cuMemAlloc is the driver's, said once, and programs run as ever.
    unset MPSSHIM_DEVICE_VMM
    MPSSHIM_CPUDRV_NO_VMM=1 "$CTL" -d || exit 1
    for p in vecadd alloc_churn; do
        timeout 60 env LD_PRELOAD="$SHIM" "$B/tests/$p" >"$W/novmm.$p" 2>&1 ||
            { echo "FAIL: $p on a device without VMM: $(tail -n 1 "$W/novmm.$p")"; rc=1; }
    done
    grep -q "device 0 has no virtual memory management: its cuMemAlloc is the driver's" \
        "$W/log/server.log" || { echo "FAIL: no line on device 0's missing VMM"; rc=1; }
    ctl quit >/dev/null
    wait_for 10 gone "$(server_pid)" 2>/dev/null
fi
[ $rc = 0 ] && echo "PASS devpool: $n runs through the $MODE server"
exit $rc
