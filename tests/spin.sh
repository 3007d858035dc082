#!/usr/bin/env bash
# The spinning policy (server/core/spin.c): with more busy clients than half the CPUs the server
# spins less ("short"), with more than the CPUs least ("off"), and says so in
# get_server_status; once they are gone it spins again ("on"). Servers counting 3 and 2 CPUs
# (MPSSHIM_SPIN_CPUS), bench/fleetc clients for 4 s, and the steps they made must be right
# (fleetc checks what it reads back).
#   tests/spin.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/spin"
status() { ctl get_server_status | grep '^Spinning'; }
spinning() { [ "$(status | awk '{print $2}')" = "$1" ]; }
# grade CPUS CLIENTS GRADE: a server counting CPUS, CLIENTS busy fleetc clients for 4 s: the
# policy must reach GRADE, and be "on" again once they are gone.
grade() {
    local cpus=$1 n=$2 want=$3 i
    MPSSHIM_SPIN_CPUS=$cpus "$CTL" -d || { rc=1; return; }
    spinning on || { echo "FAIL: an idle server does not spin: $(status)"; rc=1; }
    rm -f "$W/barrier"
    for i in $(seq "$n"); do
        env LD_PRELOAD="$SHIM" timeout 60 "$B/bench/fleetc" --seconds 4 --barrier "$W/barrier" \
            --procs "$n" >"$W/fleet.$i.out" 2>&1 &
    done
    if wait_for 30 spinning "$want"; then
        echo "$n busy clients, $cpus CPUs: $(status)"
    else
        echo "FAIL: $n busy clients on $cpus CPUs, not $want but $(status)"
        rc=1
    fi
    wait
    for i in $(seq "$n"); do
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
    wait_for 10 eval '! [ -e "$MPSSHIM_PIPE_DIRECTORY/server.pid" ]'
}
grade 3 2 short
grade 2 3 off
# Settings it does not understand are said in the log, and the defaults used.
: >"$MPSSHIM_LOG_DIRECTORY/server.log"
MPSSHIM_CROWDED_SPIN_US=abc MPSSHIM_CTX_SCHED=fast "$CTL" -d || exit 1
for want in "MPSSHIM_CROWDED_SPIN_US=abc is not a whole number of microseconds from 0 to 1000: \
the default, 200, is used" \
    "MPSSHIM_CTX_SCHED=fast is not one of auto|spin|yield|blocking: the default, auto, is used"; do
    grep -qF "$want" "$MPSSHIM_LOG_DIRECTORY/server.log" ||
        { echo "FAIL: the log does not say: $want"; rc=1; }
done
ctl quit >/dev/null
exit $rc
