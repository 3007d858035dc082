#!/usr/bin/env bash
# A client's first launch of a kernel of an image it loaded at start does not wait for other
# clients' work (issue 29; server/code/module.c, eager_load). On the real driver where a GPU is
# (its lazy load waits for every stream of the one context), else on the CPU test driver
# told to do the same (MPSSHIM_CPUDRV_LOAD_WAITS=1): first_launch late loads its library, first_launch busy then
# queues a 4-s kernel, and late's first launch must end while busy's kernel still runs. The
# same with MPSSHIM_EAGER_KERNELS=0 (the kernel loaded lazily, at that launch) must wait for
# it: the check tells the two apart.
#   tests/eager.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
real_driver_if_gpu
own_dir "$2/eager"

# round EAGER_KERNELS: 0 when late's first launch ended while busy's kernel still ran.
round() {
    rm -f "$W/go"
    MPSSHIM_CPUDRV_LOAD_WAITS=1 MPSSHIM_EAGER_KERNELS=$1 "$CTL" -d || return 2
    env LD_PRELOAD="$SHIM" "$B/tests/first_launch" late "$W/go" >"$W/late-$1.out" 2>&1 &
    local late=$!
    wait_for 20 grep -q loaded "$W/late-$1.out" || { kill -9 $late; stop_server 10; return 2; }
    env LD_PRELOAD="$SHIM" "$B/tests/first_launch" busy 4 >"$W/busy-$1.out" 2>&1 &
    local busy=$!
    wait_for 20 grep -q busy "$W/busy-$1.out" || { kill -9 $late $busy; stop_server 10; return 2; }
    touch "$W/go"
    local ok=1
    # Its first launch and what it read back, not its exit: on an H200 its library's unload
    # at the end waited for the other client's kernel (an unload waits for the context).
    # Before busy says its kernel ran (its process may outlive that a while).
    wait_for 6 grep -q "ok first launch" "$W/late-$1.out" &&
        ! grep -q "ok its kernel ran" "$W/busy-$1.out" && ok=0
    if gone "$late"; then echo "late ($1) ended before busy's kernel"; else echo "late ($1) had not ended when its launch was done"; fi
    wait "$late" || { echo "late ($1): $(tail -1 "$W/late-$1.out")"; ok=2; }
    wait "$busy" || { echo "busy ($1): $(tail -1 "$W/busy-$1.out")"; ok=2; }
    stop_server 10 || ok=2
    return $ok
}
round 256
r=$?
[ $r = 0 ] || fail "with eager loading, a first launch waited for another client's kernel (or failed: $r)"
round 0
r=$?
[ $r = 1 ] || fail "with lazy loading, the first launch did not wait for the other client's kernel (nothing tested; $r)"
[ $rc = 0 ] && echo "PASS a first launch of code loaded at start waits for nobody"
exit $rc
