#!/usr/bin/env bash
# A server per GPU keeps faults apart (docs/differences.md): the driver's fault is the
# process's, so one server's fault ends every device's shared context in it (tests/fault.sh),
# but never another server's. Two servers, each with a pipe directory of its own and, on a
# machine of two GPUs or more, CUDA_VISIBLE_DEVICES naming one GPU each (as a site would run
# them): a client of server B loops vec_add (every round checked) while a client of server A
# faults. B's client must pass every round and B must see no fault; A must see it and serve
# a new client afterwards. On the CPU test driver (CI) both servers see both test devices:
# what it shows there is that the fault stays in its server's process. Where a GPU is, the
# real driver stands behind both (lib.sh's real_driver_if_gpu).
# usage: fault_servers.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
GPU=""
real_driver_if_gpu && GPU=1
W=$2/fault_servers
rm -rf "$W"
fail() { echo "FAIL: $*"; exit 1; }
VIS_A="" VIS_B=""
if [ -n "$GPU" ] && [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
    VIS_A=0 VIS_B=1
fi

# start NAME VISIBLE: a server in $W/NAME, with CUDA_VISIBLE_DEVICES=VISIBLE where set.
start() {
    mkdir -p "$W/$1/pipe" "$W/$1/log"
    chmod 700 "$W/$1/pipe"
    (
        export MPSSHIM_PIPE_DIRECTORY=$W/$1/pipe MPSSHIM_LOG_DIRECTORY=$W/$1/log
        [ -n "$2" ] && export CUDA_VISIBLE_DEVICES=$2
        "$CTL" -d
    ) || fail "server $1 did not start"
}
# on NAME CMD...: CMD as a client of server NAME.
on() {
    local n=$1
    shift
    env MPSSHIM_PIPE_DIRECTORY="$W/$n/pipe" LD_PRELOAD="$SHIM" "$@"
}
quit_all() {
    for n in a b; do
        printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY="$W/$n/pipe" "$CTL" >/dev/null 2>&1
    done
}
trap quit_all EXIT

start a "$VIS_A"
start b "$VIS_B"
on b "$B/tests/fault" --steady 4 >"$W/steady.log" 2>&1 &
steady=$!
wait_for 20 grep -q "^ready" "$W/steady.log" || { cat "$W/steady.log"; fail "B's client never got ready"; }
on a "$B/tests/fault" >"$W/faulter.log" 2>&1 || { cat "$W/faulter.log"; fail "A's faulting client"; }
wait "$steady" || { cat "$W/steady.log"; fail "B's client did not pass every round through A's fault"; }
tail -n 2 "$W/steady.log"
grep -q "Device 0: .* in the shared context" "$W/a/log/server.log" || fail "server A did not see its fault"
! grep -q "in the shared context" "$W/b/log/server.log" || fail "server B saw a fault"
on a "$B/tests/vecadd" 1000 >"$W/after.log" 2>&1 || { cat "$W/after.log"; fail "a new client of A"; }
echo "server A (${VIS_A:+GPU $VIS_A, }faulted) served a new client; server B's client (${VIS_B:+GPU $VIS_B, }$(grep -c . "$W/steady.log") lines) ran on through it"
echo "PASS a server per GPU keeps faults apart"
