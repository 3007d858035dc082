#!/usr/bin/env bash
# bench/roundtrip.sh BUILD OUT SPEC...: the round trip and small copies through mpsshim
# servers of several settings, or placed on given CPUs, each beside native in turns (issue
# 29: launch + synchronise within 1 us of native, small pinned copies within 5%).
#
# For each SPEC, one server of its own (private pipe and log directories, quit at the end),
# then REPEATS (3) rounds of: natively, then through that server, `callbench
# launch_sync_us memcpy_4b_dtoh_us stream_query_us` and `copysweep --max 1` and `--max 256`
# (pinned buffers of 1 MiB and of 256 MiB: small copies out of a large allocation).
#   NAME:VAR=VALUE,VAR=VALUE   the server started with those settings (NAME:- for none)
#   place:SERVERCPUS:CLIENTCPU the server held to SERVERCPUS and both clients to CLIENTCPU
#                              (taskset lists), without the --max 256 sweep
# Raw lines in OUT/calls.txt and OUT/copy.txt (each prefixed "MODE SPEC ROUND"); the
# summary last: per figure and spec, every round's value. Not a test: it passes nothing.
set -u
B=$(cd "${1:?usage: bench/roundtrip.sh BUILD OUT SPEC...}" && pwd)
OUT=${2:?usage: bench/roundtrip.sh BUILD OUT SPEC...}
shift 2
REPEATS=${REPEATS:-3}
mkdir -p "$OUT"
export MPSSHIM_TEST_KERNELS=$B/tests
W=$(mktemp -d /tmp/roundtrip.XXXXXX)
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log
quit() { echo quit | timeout 20 "$B/mpsshim-control" >/dev/null 2>&1; }
trap 'quit; rm -rf "$W"' EXIT
lscpu -e >"$OUT/lscpu-e.txt" 2>&1
for spec in "$@"; do
    name=${spec%%:*} vars=${spec#*:} hold=() client=() maxes="1 256"
    if [ "$name" = place ]; then
        hold=(taskset -c "${vars%%:*}") client=(taskset -c "${vars#*:}") vars="" maxes=1
        name="place-${spec#place:}"
    fi
    [ "$vars" = - ] && vars=""
    rm -rf "$W/pipe" "$W/log"
    mkdir -p "$W/pipe" "$W/log"
    # shellcheck disable=SC2086 # VAR=VALUE words
    env -u LD_PRELOAD ${vars//,/ } "${hold[@]}" timeout 40 "$B/mpsshim-control" -d ||
        { echo "no server for $spec"; continue; }
    for r in $(seq "$REPEATS"); do
        for m in native "$name"; do
            pre=("${client[@]}")
            [ "$m" != native ] && pre+=(env "LD_PRELOAD=$B/libmpsshim.so")
            for mx in $maxes; do
                "${pre[@]}" "$B/bench/copysweep" --max "$mx" 2>&1 | sed "s/^/$m $name-max$mx r$r /" >>"$OUT/copy.txt"
            done
            "${pre[@]}" "$B/bench/callbench" launch_sync_us memcpy_4b_dtoh_us stream_query_us 2>&1 |
                sed "s/^/$m $name r$r /" >>"$OUT/calls.txt"
        done
    done
    quit
    cp -r "$W/log" "$OUT/log-$name"
done
for f in calls copy; do
    awk '$4 == "metric" && ($5 ~ /_us$/ || $5 ~ /pinned_(4096|16384|65536|262144|1048576)$/) {
        k = $5 " " $1 " " $2; v[k] = v[k] " " $6 } END { for (k in v) print k, v[k] }' "$OUT/$f.txt" | sort
done
