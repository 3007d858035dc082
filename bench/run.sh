#!/usr/bin/env bash
# Benchmarks (`make bench`): per-call cost, copy bandwidth, overlap of concurrent processes
# and GPU memory of idle processes, each measured natively, under native MPS and under
# mpsshim, on the same GPU in one run; prints a table last. bench/README.md says what each
# figure means and how it is measured.
#
# usage: bench/run.sh [BUILD_DIR] [--quick]
#   --quick              smoke run: fewer iterations, 32 MiB copies, 1 and 2 processes
#   OUT=DIR              raw outputs go there (5 files, bench-*), else to a new temp dir
#   MPSSHIM_BENCH_CPU=1  native and mpsshim columns on the CPU test driver, to test this
#                        script without a GPU; such numbers say nothing about GPUs
# Never changes GPU settings. Exits non-zero if any run failed; the table is printed anyway.
set -u

B=${1:-build}
[ $# -gt 0 ] && shift
QUICK=0
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    *)
        echo "usage: bench/run.sh [BUILD_DIR] [--quick]" >&2
        exit 2
        ;;
    esac
done
B=$(cd "$B" && pwd) || exit 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init bench

# The whole run stops starting new measurements after this many seconds, so that a hang
# under one mode cannot take the GPU machine's command limit with it.
BUDGET=300
CALLBENCH_METRICS="launch_async_us launch_sync_us stream_query_us memcpy_4b_htod_us
    memcpy_4b_dtoh_us htod_pageable_GBps dtoh_pageable_GBps htod_pinned_GBps dtoh_pinned_GBps"
if [ "$QUICK" = 1 ]; then
    OVERLAP_PROCS="1 2"
    CALLBENCH_ARGS=(--quick)
else
    OVERLAP_PROCS="1 8 16"
    CALLBENCH_ARGS=()
fi
# The CPU test driver has no spin_ns; its delay_set sleeps like the GPU's spins.
if [ "$CPU" = 1 ]; then OVERLAP_ARGS=(--kernel delay_set); else OVERLAP_ARGS=(); fi
IDLE_PROCS=8
MODES="native mps mpsshim"

declare -A RES    # RES[mode:metric] = value, FAIL or n/a
FAILED=0

# set_res MODE METRIC VALUE: a failure marks the whole run failed.
set_res() {
    add_row "$2"
    RES[$1:$2]=$3
    [ "$3" = FAIL ] && FAILED=1
    return 0
}

# GPU memory in use, MiB, summed over the GPUs (which one CUDA calls device 0 does not
# matter then); empty without nvidia-smi.
gpu_mem() {
    [ "$CPU" = 1 ] && return
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null |
        awk '{ s += $1 } END { if (NR) print s }'
}

# settle_gpu BASE: waits (at most 15 s) until memory in use is back near BASE.
settle_gpu() {
    local m
    [ -n "$1" ] || return 0
    for _ in $(seq 30); do
        m=$(gpu_mem)
        [ -n "$m" ] && [ "$m" -le $(($1 + 32)) ] && return 0
        sleep 0.5
    done
    say "note: GPU memory in use is $m MiB, $1 MiB before this mode"
}

# ---------------------------------------------------------------- runs

# record MODE NAME RC: appends the output of a run ($WORK/MODE.NAME.out) to the mode's log.
record() {
    {
        say "=== $1 $2: exit $3"
        cat "$WORK/$1.$2.out"
        say
    } >>"$OUTDIR/bench-$1.log"
}

# callbench MODE: per-call costs and bandwidths.
bench_calls() {
    local mode=$1 secs m v rc
    if [ "$QUICK" = 1 ]; then secs=$(limit 60); else secs=$(limit 120); fi
    if [ "$secs" -lt 5 ]; then
        say "  callbench: skipped, the run's time budget is spent"
        for m in $CALLBENCH_METRICS; do set_res "$mode" "$m" FAIL; done
        return
    fi
    # In the background so that a signal to this script is handled at once.
    timeout -k 5 "$secs" "${ENVP[@]}" "$B/bench/callbench" "${CALLBENCH_ARGS[@]}" \
        >"$WORK/$mode.callbench.out" 2>&1 &
    BG_PIDS=($!)
    wait_all "${BG_PIDS[@]}"
    rc=$?
    record "$mode" callbench "$rc"
    for m in $CALLBENCH_METRICS; do
        v=$(awk -v m="$m" '$1 == "metric" && $2 == m { print $3 }' "$WORK/$mode.callbench.out")
        set_res "$mode" "$m" "${v:-FAIL}"
    done
    [ "$rc" = 0 ] || {
        say "  callbench failed (exit $rc):"
        tail -n 5 "$WORK/$mode.callbench.out"
    }
}

# bench_overlap MODE P: P overlap processes at once; the slowest one's kernel time.
bench_overlap() {
    local mode=$1 p=$2 name=overlap_p$2 secs i pids=() rc v span
    secs=$(limit 90)
    if [ "$secs" -lt 5 ]; then
        say "  $name: skipped, the run's time budget is spent"
        set_res "$mode" "${name}_s" FAIL
        return
    fi
    rm -f "$WORK/barrier"
    for i in $(seq "$p"); do
        timeout -k 5 "$secs" "${ENVP[@]}" "$B/bench/overlap" "${OVERLAP_ARGS[@]}" \
            --barrier "$WORK/barrier" --procs "$p" >"$WORK/$mode.$name.$i.out" 2>&1 &
        pids+=($!)
    done
    BG_PIDS=("${pids[@]}")
    wait_all "${pids[@]}"
    rc=$?
    for i in $(seq "$p"); do
        say "--- process $i" >>"$WORK/$mode.$name.out"
        cat "$WORK/$mode.$name.$i.out" >>"$WORK/$mode.$name.out"
    done
    v=$(cat "$WORK/$mode.$name".*.out | awk '$1 == "metric" && $2 == "kernel_time_s" {
        n++; if ($3 > m) m = $3 } END { if (n == '"$p"') print m }')
    span=$(cat "$WORK/$mode.$name".*.out | awk '$2 == "window_ns" {
        if (!lo || $3 < lo) lo = $3; if ($4 > hi) hi = $4 }
        END { if (hi) printf "%.6f", (hi - lo) / 1e9 }')
    say "all $p: slowest kernel_time_s ${v:-?}, first launch to last sync end ${span:-?} s" \
        >>"$WORK/$mode.$name.out"
    record "$mode" "$name" "$rc"
    [ "$rc" = 0 ] || v=
    set_res "$mode" "${name}_s" "${v:-FAIL}"
    [ "$rc" = 0 ] || {
        say "  $name failed (exit $rc):"
        cat "$WORK/$mode.$name".*.out | grep -v '^#' | sort | uniq -c | head -n 5
    }
}

# bench_idle MODE BASE: GPU memory of IDLE_PROCS idle processes (tests/hold) over BASE,
# the memory in use before this mode's daemon started (so a server's context counts).
bench_idle() {
    local mode=$1 base=$2 secs i pids=() ready used rc=0 hold=$B/tests/hold
    secs=$(limit 60)
    if [ ! -x "$hold" ] || [ "$secs" -lt 5 ]; then
        say "  idle: skipped (${hold} missing or time budget spent)"
        set_res "$mode" "idle${IDLE_PROCS}_MiB" FAIL
        return
    fi
    for i in $(seq "$IDLE_PROCS"); do
        timeout -k 5 "$secs" "${ENVP[@]}" "$hold" 30 >"$WORK/$mode.hold.$i.out" 2>&1 &
        pids+=($!)
    done
    BG_PIDS=("${pids[@]}")
    # Until every one printed `ready`, or one exited (it failed), or the time is up.
    for _ in $(seq $((secs * 10))); do
        ready=0
        for i in $(seq "$IDLE_PROCS"); do
            grep -q '^ready' "$WORK/$mode.hold.$i.out" && ready=$((ready + 1))
        done
        [ "$ready" = "$IDLE_PROCS" ] && break
        for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null || rc=1; done
        [ "$rc" = 0 ] || break
        sleep 0.1
    done
    if [ "$ready" = "$IDLE_PROCS" ]; then
        sleep 1
        used=$(gpu_mem)
    else
        rc=1
    fi
    kill "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    BG_PIDS=()
    for i in $(seq "$IDLE_PROCS"); do
        say "--- process $i" >>"$WORK/$mode.idle.out"
        cat "$WORK/$mode.hold.$i.out" >>"$WORK/$mode.idle.out"
    done
    say "$ready of $IDLE_PROCS ready; GPU memory before the mode ${base:-n/a} MiB," \
        "with them ${used:-n/a} MiB" \
        >>"$WORK/$mode.idle.out"
    record "$mode" idle "$rc"
    if [ "$rc" != 0 ]; then
        set_res "$mode" "idle${IDLE_PROCS}_MiB" FAIL
        say "  idle: $ready of $IDLE_PROCS hold processes got ready"
    elif [ -n "$base" ] && [ -n "$used" ]; then
        set_res "$mode" "idle${IDLE_PROCS}_MiB" $((used - base))
    else
        set_res "$mode" "idle${IDLE_PROCS}_MiB" n/a
    fi
}

# all_fail MODE: every metric of MODE failed (its daemon did not start).
all_fail() {
    local m p
    for m in "idle${IDLE_PROCS}_MiB" $CALLBENCH_METRICS; do set_res "$1" "$m" FAIL; done
    for p in $OVERLAP_PROCS; do set_res "$1" "overlap_p${p}_s" FAIL; done
}

# all_na MODE: MODE could not run here (no native MPS, or the CPU test driver).
all_na() {
    local m p
    for m in "idle${IDLE_PROCS}_MiB" $CALLBENCH_METRICS; do set_res "$1" "$m" n/a; done
    for p in $OVERLAP_PROCS; do set_res "$1" "overlap_p${p}_s" n/a; done
}

# run_mode MODE: every benchmark under MODE, between the start and the stop of its daemon.
run_mode() {
    local mode=$1 log=$OUTDIR/bench-$1.log base now p why
    : >"$log"
    say "== $mode"
    if why=$(mps_missing "$mode"); then
        say "  skipped: $why" | tee -a "$log"
        all_na "$mode"
        return
    fi
    base=$(gpu_mem)
    start_daemon "$mode" "$log" || {
        all_fail "$mode"
        return
    }
    if [ "$mode" = mpsshim ]; then
        now=$(gpu_mem)
        say "server up; GPU memory ${base:-n/a} MiB before it, ${now:-n/a} MiB now" >>"$log"
    fi
    mode_env "$mode"
    bench_idle "$mode" "$base"
    bench_calls "$mode"
    for p in $OVERLAP_PROCS; do bench_overlap "$mode" "$p"; done
    stop_daemon "$mode" "$log"
    settle_gpu "$base"
}

# ---------------------------------------------------------------- table

# ratio A B: A/B (2 decimals; 2 significant digits below 0.1) when both are numbers and B is
# not 0, else "-".
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        n = "^[0-9]+([.][0-9]*)?$"
        if (a ~ n && b ~ n && b + 0 != 0) printf (a / b >= 0.1 ? "%.2f" : "%.2g"), a / b
        else printf "-" }'
}

print_table() {
    local r n m s
    say
    [ "$CPU" = 1 ] &&
        say "!!! CPU TEST DRIVER: these numbers test the script; they say nothing about GPUs !!!"
    printf '%-22s %12s %12s %12s %12s %12s\n' metric native "native MPS" mpsshim \
        mpsshim/native mpsshim/MPS
    printf 'metric\tnative\tnative_mps\tmpsshim\n' >"$OUTDIR/bench-results.tsv"
    for r in "${ROWS[@]}"; do
        n=${RES[native:$r]:-n/a}
        m=${RES[mps:$r]:-n/a}
        s=${RES[mpsshim:$r]:-n/a}
        printf '%-22s %12s %12s %12s %12s %12s\n' "$r" "$n" "$m" "$s" "$(ratio "$s" "$n")" \
            "$(ratio "$s" "$m")"
        printf '%s\t%s\t%s\t%s\n' "$r" "$n" "$m" "$s" >>"$OUTDIR/bench-results.tsv"
    done
    say "(_us, _s, _MiB: lower is better; _GBps: higher is better. mpsshim's idle${IDLE_PROCS}_MiB"
    say " includes its server's context, native MPS's its server's. Raw outputs: $OUTDIR)"
}

# ---------------------------------------------------------------- main

main() {
    bench_work
    say "mpsshim benchmarks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs," \
        "commit $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')$(
            [ "$QUICK" = 1 ] && echo ', QUICK (smoke run)')"
    bench_platform
    [ "$CPU" = 1 ] || [ ! -S /tmp/nvidia-mps/control ] ||
        say "warning: an MPS control daemon may be running in /tmp/nvidia-mps"
    bench_needs bench/callbench bench/overlap bench/spin.ptx tests/kernels.ptx libmpsshim.so \
        mpsshim-control mpsshim-server

    local mode
    for mode in $MODES; do run_mode "$mode"; done
    say "benchmarks took $SECONDS s"
    print_table
    [ "$FAILED" = 0 ] || { say "some runs FAILED: see the bench-*.log files"; exit 1; }
}

bench_summary "$OUTDIR/bench-summary.txt"
main
