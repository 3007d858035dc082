#!/usr/bin/env bash
# The native probes of bench/README.md, "A round trip taken apart" (bench/launchcost: launch
# forms; bench/hostmem: host memory kinds and ways of copying), which nothing else runs, keep
# running and printing every figure: on the CPU test driver directly (the real one where a
# GPU is) and through the shim on a server of its own. Their figures here mean nothing.
#   tests/probes.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
lib=$B/cpudrv
real_driver_if_gpu && lib=
# probe LABEL WANT CMD...: CMD exits 0, says PASS and prints WANT metric lines.
probe() {
    local label=$1 want=$2 out n
    shift 2
    out=$("$@" 2>&1)
    local st=$?
    n=$(grep -c '^metric [a-z0-9_]* [0-9.]* us$' <<<"$out")
    if [ $st = 0 ] && [ "$n" = "$want" ] && grep -q '^PASS' <<<"$out"; then
        echo "ok: $label: $n figures"
    else
        fail "$label: exit $st, $n of $want figures: $(tail -n 2 <<<"$out")"
    fi
}
direct() { timeout 120 env ${lib:+LD_LIBRARY_PATH="$lib"} "$@"; }
shimmed() { timeout 120 env LD_PRELOAD="$SHIM" "$@"; }
# launchcost: 5 forms, a launch and a round trip each; hostmem: 5 kinds x 2 ways x 2
# directions x 5 sizes.
probe "launchcost" 10 direct "$B/bench/launchcost" --batches 3
probe "hostmem" 100 direct "$B/bench/hostmem" --reps 3
own_dir "$2/probes"
"$CTL" -d || exit 1
probe "shim launchcost" 10 shimmed "$B/bench/launchcost" --batches 3
probe "shim hostmem" 100 shimmed "$B/bench/hostmem" --reps 3
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS bench's native probes"
exit $rc
