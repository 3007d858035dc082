#!/usr/bin/env bash
# bench/latprobe.sh BUILD [OUT]: the round-trip experiment of issue 29 in one go, on a GPU
# machine (bench/README.md, "latprobe"). bench/latprobe natively, with the driver's default
# hardware queues and with the server's 32; then callbench's launch + synchronise and 4-byte
# read-back and copysweep's copies up to 1 MiB, natively and through an mpsshim server of its
# own (private directories, quit at the end), in turns, REPEATS times each
# (LATPROBE_REPEATS, 3), after one callbench on each new server whose figures are shown
# apart. LATPROBE_VARIANT="VAR=VALUE ..." adds a phase with a server started with those
# settings (a column "variant"; native is measured beside it again); LATPROBE_PHASES=N runs
# the phases N times in turn (drifts of the machine fall on both). Full output under OUT
# (default: a temporary directory), a summary last.
set -u
B=${1:?usage: bench/latprobe.sh BUILD [OUT]}
B=$(cd "$B" && pwd)
OUT=${2:-$(mktemp -d /tmp/latprobe.XXXXXX)}
REPEATS=${LATPROBE_REPEATS:-3}
mkdir -p "$OUT"
export MPSSHIM_TEST_KERNELS=$B/tests
VARIANT=${LATPROBE_VARIANT:-}
W=$(mktemp -d /tmp/latprobe-run.XXXXXX)
MODES="native mpsshim"
[ -n "$VARIANT" ] && MODES="$MODES variant"
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log
quit() { echo quit | timeout 20 "$B/mpsshim-control" >/dev/null 2>&1; }
trap quit EXIT

"$B/bench/latprobe" >"$OUT/probe-default.txt" 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=32 "$B/bench/latprobe" >"$OUT/probe-32.txt" 2>&1
# One server at a time (two idle servers are two contexts on the GPU, which changed what
# was measured): each shim mode in a phase of its own, native measured in every phase.
PHASES=${LATPROBE_PHASES:-1}
for mode in $(for _ in $(seq "$PHASES"); do echo "$MODES"; done); do
    [ "$mode" = native ] && continue
    rm -rf "$W/pipe" "$W/log"
    mkdir -p "$W/pipe" "$W/log"
    vars=""
    [ "$mode" = variant ] && vars=$VARIANT
    # shellcheck disable=SC2086 # VAR=VALUE words
    env -u LD_PRELOAD $vars timeout 40 "$B/mpsshim-control" -d || { echo "no $mode server"; exit 1; }
    # The server's first program apart: it meets the quiet context being made (0.6-0.7 s from
    # its first load of code, replies from the worker meanwhile), a fresh server's cost that
    # would otherwise be one of the repeats (bench/results/issue29-2026-11-28, "Start-up's
    # phases"). Its figures are kept (calls-first-MODE.txt) and shown apart.
    LD_PRELOAD=$B/libmpsshim.so "$B/bench/callbench" launch_sync_us memcpy_4b_dtoh_us \
        >>"$OUT/calls-first-$mode.txt" 2>&1
    for _ in $(seq "$REPEATS"); do
        for m in native "$mode"; do
            pre=()
            [ "$m" != native ] && pre=(env "LD_PRELOAD=$B/libmpsshim.so")
            "${pre[@]}" "$B/bench/callbench" launch_sync_us memcpy_4b_dtoh_us >>"$OUT/calls-$m.txt" 2>&1
            "${pre[@]}" "$B/bench/copysweep" --max 1 >>"$OUT/copy-$m.txt" 2>&1
        done
    done
    quit
    rm -rf "$OUT/server-log-$mode"
    cp -r "$W/log" "$OUT/server-log-$mode"
done
trap - EXIT
rm -rf "$W"

echo "== latprobe, native (us): default queues | 32 queues"
join <(awk '/^metric/ {print $2, $3}' "$OUT/probe-default.txt" | sort) \
    <(awk '/^metric/ {print $2, $3}' "$OUT/probe-32.txt" | sort) | awk '{printf "%-32s %8s %8s\n", $1, $2, $3}'
# row FILE-STEM METRIC [MODE...]: the metric's value in each repeat, mode by mode (MODES).
row() {
    local m line="" f stem=$1 metric=$2
    shift 2
    # shellcheck disable=SC2086 # MODES is words
    [ $# -gt 0 ] || set -- $MODES
    for m in "$@"; do
        f="$OUT/$stem-$m.txt"
        line="$line$(awk -v m="$metric" '$2 == m {printf "%s ", $3}' "$f")| "
    done
    printf '%-34s %s\n' "$metric" "${line%| }"
}
echo "== calls (us), each repeat: ${MODES// / | }${VARIANT:+ ($VARIANT)}"
for m in launch_sync_us memcpy_4b_dtoh_us; do row calls $m; done
echo "== each server's first program (us), before the repeats: ${MODES#native }"
# shellcheck disable=SC2086 # the modes are words
for m in launch_sync_us memcpy_4b_dtoh_us; do row calls-first $m ${MODES#native }; done
echo "== pinned and registered copies (GB/s), each repeat: ${MODES// / | }"
for m in $(awk '/^metric copy_.*_(pinned|registered)_/ {print $2}' "$OUT/copy-native.txt" | sort -u); do
    row copy "$m"
done
