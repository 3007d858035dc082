#!/usr/bin/env bash
# bench/onectx's modes keep working (a diagnosis run only on a GPU by hand, bench/README.md
# "One context's ceiling", which nothing else here runs): on the CPU test driver, directly
# (--library as cudart loads code, --launchers, --graph, --param with its graph's nodes
# updated at every step) and through the shim on a server of its own (the graph's node
# updates replayed by the server). onectx checks what its --param launches wrote itself; its
# figures here mean nothing.
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
mode "plain" direct 2 --work-us 0
mode "--library kernel" direct 2 --work-us 0 --library kernel
mode "--launchers 1" direct 2 --work-us 0 --launchers 1
mode "--graph" direct 2 --work-us 0 --graph
mode "--param" direct 2 --work-us 0 --param
mode "--param --graph --update 3" direct 2 --work-us 0 --param --graph --update 3
mode "--param --graph --update 8" direct 2 --work-us 0 --param --graph --update 8
if out=$(direct 2 --update 3 2>&1); then fail "--update without --graph --param ran: $out"; fi
own_dir "$2/onectx"
"$CTL" -d || exit 1
mode "shim --param" shimmed 2 --work-us 0 --param
mode "shim --param --graph --update 8" shimmed 2 --work-us 0 --param --graph --update 8
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS bench/onectx's modes"
exit $rc
