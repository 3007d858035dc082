#!/usr/bin/env bash
# visible-devices (CI tier, 2 CPU test devices): a client's CUDA_VISIBLE_DEVICES selects and
# orders among the server's devices (server/core/devices.c). Indices, their order, a UUID
# prefix, values that select nothing (cuInit: CUDA_ERROR_NO_DEVICE), work landing on the
# server's device the client calls 0, and forged devices refused by the server itself.
# Usage: tests/devices.sh BUILD_DIR. Exit 0 when every check passed.
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/tests/lib.sh"
W=$(mktemp -d /tmp/mpsshim-devices.XXXXXX)
use_dir "$W"
FAIL=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1: $2"; FAIL=1; }
# check NAME GOT WANT
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got [$2], want [$3]"; fi; }
# devs VALUE: the devices program's output under CUDA_VISIBLE_DEVICES=VALUE
devs() { CUDA_VISIBLE_DEVICES=$1 shim "$B/tests/devices"; }
uuids() { awk '/^device / {printf "%s ", $3}'; }
cleanup() {
    [ -n "${HOLD_IN:-}" ] && exec {HOLD_IN}>&-
    stop_server 10 || kill -9 "$(server_pid)" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
"$CTL" -d || { echo "no server"; exit 1; }

all=$(shim "$B/tests/devices")
echo "$all"
U0=$(echo "$all" | awk '/^device 0 / {print $3}')
U1=$(echo "$all" | awk '/^device 1 / {print $3}')
check unset-sees-both "$(echo "$all" | uuids)" "$U0 $U1 "
check index-1 "$(devs 1 | uuids)" "$U1 "
check index-1-0-reversed "$(devs 1,0 | uuids)" "$U1 $U0 "
check uuid-full "$(devs "$U1" | uuids)" "$U1 "
check uuid-prefix "$(devs "${U1:0:12}" | uuids)" "$U1 "
check uuid-list "$(devs "$U1,${U0:0:12}" | uuids)" "$U1 $U0 "
check invalid-ends-list "$(devs 1,x,0 | uuids)" "$U1 "
check out-of-range-ends-list "$(devs 0,5,1 | uuids)" "$U0 "
for v in 5 "" -1 0,0 "${U0:0:11}" MIG-0123; do
    check "no-device[$v]" "$(devs "$v" | head -n 1)" "init CUDA_ERROR_NO_DEVICE"
done
check client-refuses-forged "$(devs 0 | grep PrimaryCtxRetain)" \
    "cuDevicePrimaryCtxRetain(1) CUDA_ERROR_INVALID_DEVICE"

# Work of a client given device 1 lands on the server's device 1.
exec {HOLD_IN}> >(CUDA_VISIBLE_DEVICES=1 LD_PRELOAD="$SHIM" exec "$B/tests/devices" hold 64 >"$W/hold.out" 2>&1)
wait_for 30 grep -q '^ready' "$W/hold.out" || bad hold-ready "$(cat "$W/hold.out")"
grep '^ready' "$W/hold.out"
H=$(pgrep -f "$B/tests/devices hold 64" | head -n 1)
info=$(ctl "get_client_info $H")
echo "$info"
check hold-device-1-memory "$(echo "$info" | awk '/Device 1: memory used/ {print ($5 >= 67108864)}')" 1
check hold-device-0-none "$(echo "$info" | awk '/Device 0: memory used/ {print $5}')" 0
check device-client-list "$(ctl get_device_client_list | grep " $H\$")" "$U1 $H"
exec {HOLD_IN}>&-
HOLD_IN=
wait_for 20 no_clients || bad hold-gone "the holding client did not leave"

# The server refuses forged devices whatever the client library says.
"$B/tests/unit/rawclient" devices || bad rawclient-devices "see above"
[ "$FAIL" = 0 ] && echo "visible-devices: all checks passed"
exit "$FAIL"
