#!/usr/bin/env bash
# Fault containment (CI tier, on the server of MPSSHIM_PIPE_DIRECTORY, CPU test driver):
# three clients loop vec_add on device 0, a fourth waits inside a synchronisation on a long
# kernel (its worker is stuck in the driver), a fifth does the same from a process of two
# threads (its wait is polled: the fault ends it), a sixth loops on device 1; then a client
# launches vec_add through a wild pointer. Each device-0 client must see a sticky error and
# leave cleanly. The device-1 one sees it too and leaves cleanly: the driver's fault is the
# process's (tests/progs/fault.c --device1; the CPU test driver models it), and the server
# holds every device's shared context in one process. MPS keeps a fault to its device; this
# says "KNOWN LIMIT" on a line of its own (the GPU tier makes it a row) and checks that the
# device-1 client left with the fault, not hung. A new server process must take over
# within 1.5 s (server.pid and get_server_status name it, and it names the faulted one
# while that still serves its clients), a new client must pass vecadd there, the faulted
# server must exit once its last client has left, and the tables and memory must end as they
# began. With `gpu` (the GPU tier, tests/gpu.sh: its server on the real driver) the same,
# except what only the CPU test driver makes observable: on a GPU the fault ends the long
# kernel at once, so the faulted server may be gone before it can be seen, a second device
# may be missing (that client skips), and the driver's own memory in the new server is
# reported, not compared.
# usage: fault.sh BUILD_DIR WORK_DIR [gpu]
set -u
B=$(cd "$1" && pwd)
W=$2/fault
GPU=${3:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
[ -n "$GPU" ] && unset MPSSHIM_DRIVER MPSSHIM_CPUDRV_DEVICES # lib.sh's are the CPU driver's
mkdir -p "$W"
log=$MPSSHIM_LOG_DIRECTORY/server.log
fail() { echo "FAIL: $*"; exit 1; }

wait_for 10 no_clients || fail "clients of earlier tests still there"
base=$(mem_used)
old=$(server_pid)
pids=""
for i in 1 2 3; do
    env LD_PRELOAD="$SHIM" "$B/tests/fault" --bystander 60 >"$W/bystander$i.log" 2>&1 &
    pids="$pids $!"
done
# The bystanders' first rounds before the long kernels: on an H100 a bystander's stream
# shared a hardware queue with a long kernel (CUDA_DEVICE_MAX_CONNECTIONS queues for every
# client's streams) and got ready only when it ended.
for f in bystander1 bystander2 bystander3; do
    wait_for 10 grep -q "^ready" "$W/$f.log" || { cat "$W/$f.log"; fail "$f never got ready"; }
done
# Every client loads its module and allocates before any long kernel starts (FAULT_GO,
# tests/progs/fault.c): on an H100 a client's module load waited inside the server's driver
# for another client's running kernel, and the waiter's second thread frees memory (a
# cuMemFree in the shared context waits for every client's kernels). They launch on go.
go=$W/go-long
gofault=$W/go-fault
rm -f "$go" "$gofault"
# On a GPU their kernels may end before the fault (fault.c, --late-ok): their next call
# must then see it.
late=${GPU:+--late-ok}
env FAULT_GO="$go" LD_PRELOAD="$SHIM" "$B/tests/fault" --waiter 20 $late >"$W/waiter.log" 2>&1 &
waiter=$!
pids="$pids $waiter"
# The CPU test driver runs a kernel to its end despite the fault, so the stuck client hears
# of it when its 8 s kernel ends: before the faulted server ends its clients (10 s after the
# fault by default, MPSSHIM_FAULT_LINGER; its calls would then fail with
# CUDA_ERROR_MPS_CLIENT_TERMINATED). On a GPU the fault ends the kernel at once.
env FAULT_GO="$go" LD_PRELOAD="$SHIM" "$B/tests/fault" --stuck 8 $late >"$W/stuck.log" 2>&1 &
pids="$pids $!"
env FAULT_GO="$gofault" LD_PRELOAD="$SHIM" "$B/tests/fault" >"$W/faulter.log" 2>&1 &
faulter=$!
for f in waiter stuck faulter; do
    wait_for 20 grep -q "^prepared" "$W/$f.log" || { cat "$W/$f.log"; fail "$f never got prepared"; }
done
touch "$go"
env LD_PRELOAD="$SHIM" "$B/tests/fault" --other 3 >"$W/other.log" 2>&1 &
other=$!
for f in waiter stuck other; do
    # (other skips where there is one device)
    wait_for 10 grep -q "^ready\|^SKIP" "$W/$f.log" || { cat "$W/$f.log"; fail "$f never got ready"; }
done
# The faulted server says FAULT until its successor answers too (a few ms): maybe seen.
(for _ in $(seq 400); do ctl get_server_status | grep "^Status"; sleep 0.01; done) >"$W/status.log" &
poller=$!
touch "$gofault"
wait "$faulter" || { cat "$W/faulter.log"; fail "the faulting client"; }
# A client that comes right after is served on the fresh context.
shim "$B/tests/vecadd" 1000 >"$W/newclient.log" 2>&1 || { cat "$W/newclient.log"; fail "a new client"; }
new=$(server_pid)
[ -n "$new" ] && [ "$new" != "$old" ] || fail "no new server took over (server.pid says ${new:-nothing})"
grep -q "Server $new\] New client .*(vecadd)" "$log" || fail "the new client was not served by server $new"
st=$(ctl get_server_status)
echo "$st" | grep -q "^Server $new$" || fail "get_server_status does not name server $new: $st"
rc=0
for p in $pids; do wait "$p" || rc=1; done
wait "$other"
orc=$?
[ $orc = 0 ] || [ $orc = 77 ] || [ $orc = 3 ] || rc=1
kill "$poller" 2>/dev/null
wait "$poller" 2>/dev/null
tail -n 3 "$W"/*.log
[ $rc = 0 ] || fail "a bystander"
echo "statuses seen: $(uniq "$W/status.log" | cut -d' ' -f2 | tr '\n' ' ')"
grep -q "Server $old\] Device 0: .* in the shared context" "$log" || fail "the server did not see the fault"
ctl get_server_status | grep -q "^Status ACTIVE$" || fail "not ACTIVE afterwards"
grep "Device 0: .* in the shared context\|made again\|did not let go\|Client process $waiter: its" "$log" | tail -n 4
[ -n "$GPU" ] || grep -q "Client process $waiter: .* 1 wait ended with the error" "$log" ||
    fail "the polled wait was not ended by the fault"
if [ $orc = 3 ]; then
    grep -q "Server $old\] Device 1: .* in the shared context" "$log" ||
        fail "the device-1 client got the fault, but the server did not see device 1's"
    echo "KNOWN LIMIT: device 1's client got device 0's fault ($(grep -o 'failed with [A-Z_]*' \
        "$W/other.log")): the server's devices share its process, and the driver's fault is the process's (a server per GPU keeps it apart: row server-per-gpu)"
fi
# The bound is 2 s: the successor's retain is most of it, and it is slower after a fault when
# the faulted process had two contexts, its shared one and its quiet one (quietctx.c; dead with
# the fault too: its unregistrations then answer the fault at once, and skipping them changed
# nothing), slower still when the quiet one was being made. On H200s (`MPSSHIM_GPU_ONLY=faults
# bash tests/gpu.sh`, and the tier): with the quiet context made at the server's start
# (2026-11-30), 953-1072 ms in nine runs on three machines; on one of them 726 and 766 ms with
# MPSSHIM_QUIET_CONTEXT=0 against 953 and 957 with it. With it made when first needed (the
# clients here start it, 2026-12-01, two machines): 1103-1625 ms in seven runs, the fault coming
# during its making or just after; a faulted server that destroyed its dead quiet context at once
# (a probe; the destroy took 1.1-1.2 s) did no better, 1322-1443 ms. A retain with no fault takes
# 470-510 ms.
ms=$(grep -o "Server $new\] Device 0: shared context made again [0-9]* ms" "$log" | awk '{print $9}')
[ -n "$ms" ] && [ "$ms" -lt 2000 ] || fail "context made again after ${ms:-never} ms"
wait_for 30 grep -q "Server $old\] Server exited" "$log" ||
    fail "the faulted server $old did not exit after its last client"
wait_for 10 no_clients || fail "clients not released"
st=$(ctl get_server_status)
echo "$st"
used=$(echo "$st" | awk '/^Device 0 memory used/ {print $5}')
if [ -n "$GPU" ]; then
    echo "device 0 memory used $used bytes, $base before the fault (a new context)"
else
    [ "$used" = "$base" ] || fail "device 0 memory used $used, $base before"
fi
! grep -q "tables not empty\|objects left\|counters not zero" "$log" || fail "tables not empty"
echo "all checks passed"
