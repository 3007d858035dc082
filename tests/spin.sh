#!/usr/bin/env bash
# The spinning policy (server/spin.c): with more busy clients than half the CPUs the server
# stops spinning and says so in get_server_status; once they are gone it spins again. A
# server counting 2 CPUs (MPSSHIM_SPIN_CPUS=2), two bench/fleetc clients for 4 s, and the
# steps they made must be right (fleetc checks what it reads back).
#   tests/spin.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
W=$2/spin
mkdir -p "$W"
use_dir "$W"
export MPSSHIM_SPIN_CPUS=2
"$CTL" -d || exit 1
rc=0
status() { ctl get_server_status | grep '^Spinning'; }
spinning() { [ "$(status | awk '{print $2}')" = "$1" ]; }
spinning on || { echo "FAIL: an idle server does not spin: $(status)"; rc=1; }
for i in 1 2; do
    env LD_PRELOAD="$SHIM" timeout 60 "$B/bench/fleetc" --seconds 4 --barrier "$W/barrier" \
        --procs 2 >"$W/fleet.$i.out" 2>&1 &
done
if wait_for 30 spinning off; then
    echo "two busy clients: $(status)"
else
    echo "FAIL: two busy clients on 2 CPUs, still $(status)"
    rc=1
fi
wait
for i in 1 2; do
    grep -q '^metric steps_per_s' "$W/fleet.$i.out" ||
        { echo "FAIL: fleetc $i:"; cat "$W/fleet.$i.out"; rc=1; }
done
if wait_for 10 spinning on; then
    echo "clients gone: $(status)"
else
    echo "FAIL: the clients left, still $(status)"
    rc=1
fi
ctl quit >/dev/null
exit $rc
