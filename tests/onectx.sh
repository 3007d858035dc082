#!/usr/bin/env bash
# bench/onectx's modes keep working (a diagnosis run only on a GPU by hand, bench/README.md
# "One context's ceiling", which nothing else here runs): on the CPU test driver, directly
# (--library as cudart loads code, --launchers, --graph, --param with its graph's nodes
# updated at every step) and through the shim on a server of its own (the graph's node
# updates replayed by the server). onectx checks what its --param launches wrote itself; its
# figures here mean nothing. The GPU tier runs it with ONECTX_THREADS=16 ONECTX_LAUNCHES=12
# (defaults 2 and 8): its log then has what every mode makes on the real driver, the update
# cost of graphs (bench/README.md, "One context's ceiling") among them.
#   tests/onectx.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# Where a GPU is, "directly" is on the real driver.
lib=$B/cpudrv
real_driver_if_gpu && lib=
P=$B/bench/onectx
# mode LABEL CMD...: CMD prints onectx's steps metric and exits 0.
mode() {
    local label=$1 out
    shift
    out=$("$@" 2>&1)
    if [ $? = 0 ] && grep -q '^metric steps_per_s [0-9.]* steps/s' <<<"$out"; then
        echo "ok: $label: $(grep -o 'steps_per_s [0-9.]*' <<<"$out")"
    else
        fail "$label: $(tail -n 2 <<<"$out")"
    fi
}
direct() { timeout 60 env ${lib:+LD_LIBRARY_PATH="$lib"} "$P" "$@"; }
shimmed() { timeout 60 env LD_PRELOAD="$SHIM" "$P" "$@"; }
T=${ONECTX_THREADS:-2} K=${ONECTX_LAUNCHES:-8}
[[ $T =~ ^[1-9][0-9]*$ && $K =~ ^[1-9][0-9]*$ ]] && [ "$K" -ge 2 ] || {
    echo "FAIL: ONECTX_THREADS ($T) and ONECTX_LAUNCHES ($K, at least 2) are counts"
    exit 1
}
echo "$T threads, $K launches a step, no host work"
# run LABEL direct|shimmed OPTION...: onectx T --work-us 0 --launches K OPTION...
run() { mode "$1" "$2" "$T" --work-us 0 --launches "$K" "${@:3}"; }
run "plain" direct
run "--library kernel" direct --library kernel
run "--launchers 1" direct --launchers 1
run "--graph" direct --graph
run "--param" direct --param
run "--param --graph --update 0" direct --param --graph --update 0
run "--param --graph --update $((K / 2))" direct --param --graph --update $((K / 2))
run "--param --graph --update $K" direct --param --graph --update "$K"
if out=$(direct 2 --update 3 2>&1); then fail "--update without --graph --param ran: $out"; fi
own_dir "$2/onectx"
"$CTL" -d || exit 1
run "shim --param" shimmed --param
run "shim --param --graph --update $K" shimmed --param --graph --update "$K"
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS bench/onectx's modes"
exit $rc
