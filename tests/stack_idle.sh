#!/usr/bin/env bash
# The stack size the driver grows the shared context to for the clients' kernels goes back
# to where it started once no client is left (server/core/context.c, srv_limits_idle): the CPU
# test driver raises the limit to 64 KiB at every launch (MPSSHIM_CPUDRV_KERNEL_STACK, as
# the real driver does for a kernel with that much local memory per thread, which on an
# H200 cost 1.8 GiB at 8 KiB); tests/stack_limit, run twice one after the other, must find
# the limit grown after its launch the first time and back at the start the second.
#   tests/stack_idle.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/stack-idle"
MPSSHIM_CPUDRV_KERNEL_STACK=65536 "$CTL" -d || exit 1
LOG=$MPSSHIM_LOG_DIRECTORY/server.log
shim "$B/tests/stack_limit" >"$W/first.out" 2>&1 || fail "first run: $(tail -n 1 "$W/first.out")"
line=$(grep "^stack limit" "$W/first.out")
echo "first client:  $line"
start=$(echo "$line" | awk '{print $6 + 0}')
grown=$(echo "$line" | awk '{print $NF}')
[ "$grown" = 65536 ] && [ "$start" != 65536 ] ||
    fail "the CPU driver did not grow the limit from $start ($line)"
said() { grep -q "set back to $start now that no client is left: CUDA_SUCCESS" "$LOG"; }
wait_for 5 said || fail "the server did not set the stack size back: $(grep 'stack size' "$LOG")"
grep "stack size per thread" "$LOG" | sed 's/^.*\] //'
shim "$B/tests/stack_limit" >"$W/second.out" 2>&1 || fail "second run: $(tail -n 1 "$W/second.out")"
line=$(grep "^stack limit" "$W/second.out")
echo "second client: $line"
[ "$(echo "$line" | awk '{print $6 + 0}')" = "$start" ] ||
    fail "the second client found the stack size limit its predecessor's kernels grew ($line)"
ctl quit >/dev/null
wait_for 10 gone "$(server_pid)"
[ $rc = 0 ] && echo "PASS stack-idle"
exit $rc
