#!/usr/bin/env bash
# SM shares and memory limits (`make bench-throttle`): bench/throttle clients with an active
# thread percentage and a pinned device memory limit, natively, under native MPS
# (CUDA_MPS_*) and under mpsshim (MPSSHIM_*), on the same GPU in one run; prints a table
# last. bench/README.md says what each row means.
#
# usage: bench/throttle.sh [BUILD_DIR]
#   OUT=DIR              raw outputs go there (throttle-*), else to a new temp dir
#   MPSSHIM_BENCH_CPU=1  native and mpsshim columns on the CPU test driver (delay_set instead
#                        of the FMA kernel, no SMs seen): tests this script's plumbing only
# Never changes GPU settings. Exits non-zero if any run failed; the table is printed anyway.
set -u

B=${1:-build}
[ $# -le 1 ] || {
    echo "usage: bench/throttle.sh [BUILD_DIR]" >&2
    exit 2
}
B=$(cd "$B" && pwd) || exit 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init throttle

# No experiment starts after this many seconds (a normal run takes well under half).
BUDGET=150
PROG=$B/bench/throttle
LAUNCHES=10
TARGET_S=0.4 # T100: the kernel phase of one client on the whole GPU
MEM_LIMIT=1G
MODES="native mps mpsshim"

declare -A R # R[mode:exp:client:metric]: a client's figures (metric lines, sms_reported, rc)
declare -A CELL  # CELL[mode:row] = what the table shows
FAILED=0
KARGS=()

# limit_env MODE PCT MEM: LIMV, the variables giving one client of MODE the share PCT ("-":
# none) and the memory limit MEM ("-": none). Native has no limits: it gets none.
limit_env() {
    local pfx
    LIMV=()
    case $1 in
    mps) pfx=CUDA_MPS_ ;;
    mpsshim) pfx=MPSSHIM_ ;;
    *) return ;;
    esac
    [ "$2" = - ] || LIMV+=("${pfx}ACTIVE_THREAD_PERCENTAGE=$2")
    [ "$3" = - ] || LIMV+=("${pfx}PINNED_DEVICE_MEM_LIMIT=0=$3")
}

# ---------------------------------------------------------------- runs

# group MODE EXP ARGS CLIENT...: runs the clients at once (meeting at a barrier), each CLIENT
# "PCT MEM" (share and memory limit, "-" for none), all with the throttle ARGS (one word,
# split); stores each one's figures in R[MODE:EXP:i:*] and appends the outputs to the mode's
# log. Returns non-zero when a client failed.
group() {
    local mode=$1 exp=$2 args=$3 secs i n pids=() rc spec f
    shift 3
    n=$#
    secs=$(limit 40)
    if [ "$secs" -lt 5 ]; then
        say "  $exp: skipped, the run's time budget is spent"
        FAILED=1
        return 1
    fi
    rm -f "$WORK/barrier"
    mode_env "$mode"
    i=0
    for spec in "$@"; do
        i=$((i + 1))
        # shellcheck disable=SC2086 # spec is two words
        limit_env "$mode" $spec
        # shellcheck disable=SC2086 # args are words
        timeout -k 5 "$secs" "${ENVP[@]}" "${LIMV[@]}" "$PROG" "${KARGS[@]}" $args \
            --barrier "$WORK/barrier" --procs "$n" >"$WORK/$mode.$exp.$i.out" 2>&1 &
        pids+=($!)
        say "=== $mode $exp client $i: ${LIMV[*]:-no limits} $PROG ${KARGS[*]} $args" \
            >>"$OUTDIR/throttle-$mode.log"
    done
    BG_PIDS=("${pids[@]}")
    wait_all "${pids[@]}"
    rc=$?
    for i in $(seq "$n"); do
        f=$WORK/$mode.$exp.$i.out
        {
            say "--- $mode $exp client $i"
            cat "$f"
        } >>"$OUTDIR/throttle-$mode.log"
        R[$mode:$exp:$i:sms_reported]=$(awk '$1 == "sms_reported" { print $2 }' "$f")
        while read -r m v; do
            R[$mode:$exp:$i:$m]=$v
        done < <(awk '$1 == "metric" { print $2, $3 }' "$f")
        R[$mode:$exp:$i:t0]=$(awk '$2 == "window_ns" { print $3 }' "$f")
        R[$mode:$exp:$i:t1]=$(awk '$2 == "window_ns" { print $4 }' "$f")
    done
    say "=== $mode $exp: exit $rc" >>"$OUTDIR/throttle-$mode.log"
    if [ "$rc" != 0 ]; then
        FAILED=1
        say "  $exp failed (exit $rc):"
        cat "$WORK/$mode.$exp".*.out | grep -v '^#' | grep -E 'FAIL|rror' | sort | uniq -c |
            head -n 5
        return 1
    fi
    return 0
}

# get MODE EXP CLIENT METRIC: the stored figure, or "?".
get() {
    local v=${R[$1:$2:$3:$4]:-}
    echo "${v:-?}"
}

# ratio A B: A/B (2 decimals) when both are numbers and B is not 0, else "?".
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        n = "^[0-9]+([.][0-9]*)?$"
        if (a ~ n && b ~ n && b + 0 != 0) printf "%.2f", a / b; else printf "?" }'
}

# cell MODE ROW VALUE
cell() {
    add_row "$2"
    CELL[$1:$2]=$3
}

# The rows, in order; each experiment's cells.
ROW_A1="a 100%: T100 wall s"
ROW_A2="a 100%: T100 / native T100"
ROW_A3="a 100%: SMs reported/seen"
ROW_B1="b 25%: SMs reported/seen"
ROW_B2="b 25%: time / T100"
ROW_C1="c 2x50%: SMs rep/seen, each"
ROW_C2="c 2x50%: time / T100, each"
ROW_C3="c 2x50%: span / T100"
ROW_D1="d 50%+100%: 50% rep/seen"
ROW_D2="d 50%+100%: 50% time/T100"
ROW_D3="d 50%+100%: 100% seen, t/T100"
ROW_E1="e limit $MEM_LIMIT, 2 GiB: got"
ROW_E2="e no limit, 2 GiB: got"
ROW_E3="e limit $MEM_LIMIT: free/total MiB"

# fill MODE EXP ROW...: marks the experiment's rows FAIL or n/a (from $2 on: the rows).
fill() {
    local mode=$1 v=$2 r
    shift 2
    for r in "$@"; do cell "$mode" "$r" "$v"; done
}

# exp_a MODE: one client on the whole GPU; its time is the mode's T100.
exp_a() {
    local mode=$1 t
    if group "$mode" a "--launches $LAUNCHES" "- -"; then
        t=$(get "$mode" a 1 wall_s)
        R[$mode:T100]=$t
        cell "$mode" "$ROW_A1" "$t"
        cell "$mode" "$ROW_A2" "$(ratio "$t" "${R[native:T100]:-}")"
        cell "$mode" "$ROW_A3" "$(get "$mode" a 1 sms_reported)/$(get "$mode" a 1 sms_seen)"
    else
        fill "$mode" FAIL "$ROW_A1" "$ROW_A2" "$ROW_A3"
    fi
}

# exp_b MODE: one client held to 25%.
exp_b() {
    local mode=$1
    if [ "$mode" = native ]; then
        fill "$mode" n/a "$ROW_B1" "$ROW_B2"
    elif group "$mode" b "--launches $LAUNCHES" "25 -"; then
        cell "$mode" "$ROW_B1" "$(get "$mode" b 1 sms_reported)/$(get "$mode" b 1 sms_seen)"
        cell "$mode" "$ROW_B2" "$(ratio "$(get "$mode" b 1 wall_s)" "${R[$mode:T100]:-}")"
    else
        fill "$mode" FAIL "$ROW_B1" "$ROW_B2"
    fi
}

# exp_c MODE: two clients at 50% at once (natively: two whole-GPU clients, time-sliced).
exp_c() {
    local mode=$1 pct=50 t0 t1 span
    [ "$mode" = native ] && pct=-
    if group "$mode" c "--launches $LAUNCHES" "$pct -" "$pct -"; then
        cell "$mode" "$ROW_C1" "$(get "$mode" c 1 sms_reported)/$(get "$mode" c 1 sms_seen) $(
            get "$mode" c 2 sms_reported)/$(get "$mode" c 2 sms_seen)"
        cell "$mode" "$ROW_C2" "$(ratio "$(get "$mode" c 1 wall_s)" "${R[$mode:T100]:-}") $(
            ratio "$(get "$mode" c 2 wall_s)" "${R[$mode:T100]:-}")"
        t0=$(printf '%s\n' "$(get "$mode" c 1 t0)" "$(get "$mode" c 2 t0)" | sort -n | head -n 1)
        t1=$(printf '%s\n' "$(get "$mode" c 1 t1)" "$(get "$mode" c 2 t1)" | sort -n | tail -n 1)
        span=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')
        cell "$mode" "$ROW_C3" "$(ratio "$span" "${R[$mode:T100]:-}")"
    else
        fill "$mode" FAIL "$ROW_C1" "$ROW_C2" "$ROW_C3"
    fi
}

# exp_d MODE: a 50% client (1) beside a 100% bystander (2).
exp_d() {
    local mode=$1
    if [ "$mode" = native ]; then
        fill "$mode" n/a "$ROW_D1" "$ROW_D2" "$ROW_D3"
    elif group "$mode" d "--launches $LAUNCHES" "50 -" "- -"; then
        cell "$mode" "$ROW_D1" "$(get "$mode" d 1 sms_reported)/$(get "$mode" d 1 sms_seen)"
        cell "$mode" "$ROW_D2" "$(ratio "$(get "$mode" d 1 wall_s)" "${R[$mode:T100]:-}")"
        cell "$mode" "$ROW_D3" "$(get "$mode" d 2 sms_seen) $(
            ratio "$(get "$mode" d 2 wall_s)" "${R[$mode:T100]:-}")"
    else
        fill "$mode" FAIL "$ROW_D1" "$ROW_D2" "$ROW_D3"
    fi
}

# got MODE EXP CLIENT: "<MiB>" and "OOM" when it ran out of memory.
got() {
    local mib oom
    mib=$(get "$1" "$2" "$3" alloc_mib)
    oom=$(get "$1" "$2" "$3" alloc_oom)
    if [ "$oom" = 1 ]; then echo "$mib OOM"; else echo "$mib ok"; fi
}

# exp_e MODE: a client limited to MEM_LIMIT and one with no limit each ask for 2 GiB in
# 256 MiB chunks, at once; each holds what it got until both are done.
exp_e() {
    local mode=$1
    if [ "$mode" = native ]; then
        fill "$mode" n/a "$ROW_E1" "$ROW_E2" "$ROW_E3"
    elif group "$mode" e "--launches 0 --alloc 2048 --chunk 256" "- $MEM_LIMIT" "- -"; then
        cell "$mode" "$ROW_E1" "$(got "$mode" e 1)"
        cell "$mode" "$ROW_E2" "$(got "$mode" e 2)"
        cell "$mode" "$ROW_E3" "$(get "$mode" e 1 mem_free_mib)/$(get "$mode" e 1 mem_total_mib)"
    else
        fill "$mode" FAIL "$ROW_E1" "$ROW_E2" "$ROW_E3"
    fi
}

all_cells() {
    fill "$1" "$2" "$ROW_A1" "$ROW_A2" "$ROW_A3" "$ROW_B1" "$ROW_B2" "$ROW_C1" "$ROW_C2" \
        "$ROW_C3" "$ROW_D1" "$ROW_D2" "$ROW_D3" "$ROW_E1" "$ROW_E2" "$ROW_E3"
}

# run_mode MODE: the experiments under MODE, between the start and the stop of its daemon.
run_mode() {
    local mode=$1 log=$OUTDIR/throttle-$1.log why
    : >"$log"
    say "== $mode"
    if why=$(mps_missing "$mode"); then
        say "  skipped: $why"
        all_cells "$mode" n/a
        return
    fi
    start_daemon "$mode" "$log" || {
        all_cells "$mode" FAIL
        FAILED=1
        return
    }
    exp_a "$mode"
    exp_b "$mode"
    exp_c "$mode"
    exp_d "$mode"
    exp_e "$mode"
    stop_daemon "$mode" "$log"
}

# calibrate: sets the kernel's iterations so that LAUNCHES launches take about TARGET_S
# natively on the whole GPU (from a short native run); keeps the default if that fails.
calibrate() {
    local f=$WORK/calibrate.out iters=60000 t
    [ "$CPU" = 1 ] && return
    mode_env native
    timeout -k 5 30 "${ENVP[@]}" "$PROG" --launches 2 --iters "$iters" >"$f" 2>&1
    t=$(awk '$1 == "metric" && $2 == "wall_s" { print $3 }' "$f")
    if [ -z "$t" ]; then
        say "calibration failed (the default kernel size is used):"
        grep -v '^#' "$f" | head -n 5
        return
    fi
    iters=$(awk -v i="$iters" -v t="$t" -v want="$TARGET_S" -v n="$LAUNCHES" 'BEGIN {
        v = int(i * want / n / (t / 2)); if (v < 1000) v = 1000; print v }')
    KARGS+=(--iters "$iters")
    say "calibration: 2 launches of $PROG --iters 60000 took $t s; using --iters $iters"
}

# ---------------------------------------------------------------- table

print_table() {
    local r
    say
    [ "$CPU" = 1 ] &&
        say "!!! CPU TEST DRIVER: these numbers test the script; they say nothing about GPUs !!!"
    printf '%-30s %16s %16s %16s\n' experiment native "native MPS" mpsshim
    printf 'experiment\tnative\tnative_mps\tmpsshim\n' >"$OUTDIR/throttle-results.tsv"
    for r in "${ROWS[@]}"; do
        printf '%-30s %16s %16s %16s\n' "$r" "${CELL[native:$r]:-n/a}" "${CELL[mps:$r]:-n/a}" \
            "${CELL[mpsshim:$r]:-n/a}"
        printf '%s\t%s\t%s\t%s\n' "$r" "${CELL[native:$r]:-n/a}" "${CELL[mps:$r]:-n/a}" \
            "${CELL[mpsshim:$r]:-n/a}" >>"$OUTDIR/throttle-results.tsv"
    done
    say "(times: the client's kernel phase, host clock; / T100: over the same mode's one"
    say " client on the whole GPU. rep/seen: SM count the device reports to the client / SMs"
    say " its blocks ran on. native c: two whole-GPU clients, time-sliced. span: first start"
    say " to last end of the two. e: MiB got of 2048, OOM = CUDA_ERROR_OUT_OF_MEMORY; free/total:"
    say " cuMemGetInfo of the limited client before it allocates."
    say " Expected under mpsshim: b 32/32 and ~4.1, c 64/64 and ~2.1 each, d seen <= 64,"
    say " e $MEM_LIMIT: 1024 OOM, no limit: 2048 ok. Raw outputs: $OUTDIR)"
}

# ---------------------------------------------------------------- main

main() {
    bench_work
    # Our own limits only, too: nothing may come from the caller.
    unset CUDA_MPS_ACTIVE_THREAD_PERCENTAGE MPSSHIM_ACTIVE_THREAD_PERCENTAGE \
        CUDA_MPS_PINNED_DEVICE_MEM_LIMIT MPSSHIM_PINNED_DEVICE_MEM_LIMIT \
        CUDA_MPS_CLIENT_PRIORITY MPSSHIM_CLIENT_PRIORITY

    say "mpsshim SM shares and memory limits: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(
        git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
    bench_platform
    [ "$CPU" = 1 ] && KARGS=(--kernel delay_set --iters 20000000)
    bench_needs bench/throttle tests/throttle.sm_90.cubin tests/kernels.ptx libmpsshim.so \
        mpsshim-control mpsshim-server
    calibrate

    local mode
    for mode in $MODES; do run_mode "$mode"; done
    say "took $SECONDS s"
    print_table
    [ "$FAILED" = 0 ] || {
        say "some runs FAILED: see the throttle-*.log files"
        exit 1
    }
}

bench_summary "$OUTDIR/throttle-summary.txt"
main
