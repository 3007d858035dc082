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
CPU=${MPSSHIM_BENCH_CPU:-0}
OUTDIR=${OUT:-}
[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/mpsshim-bench.XXXXXX)
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)

# The whole run stops starting new measurements after this many seconds, so that a hang
# under one mode cannot take the GPU machine's command limit with it.
BUDGET=300
SHIM=$B/libmpsshim.so
SHIM_CTL=$B/mpsshim-control
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
declare -a ROWS=() BG_PIDS=()
FAILED=0
SHIM_UP=0
MPS_UP=0
MPS_CTL=
WORK=
TEE_PID=

say() { printf '%s\n' "$*"; }

# limit SECS: SECS, or less when the run's budget has less left.
limit() {
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

add_row() {
    local r
    for r in "${ROWS[@]}"; do [ "$r" = "$1" ] && return; done
    ROWS+=("$1")
}

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

# mode_env MODE: ENVP, the env(1) prefix every program of MODE runs under.
mode_env() {
    ENVP=(env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY)
    case $1 in
    native)
        [ "$CPU" = 1 ] && ENVP+=("LD_LIBRARY_PATH=$B/cpudrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        ;;
    mps)
        ENVP=(env "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps-pipe" "CUDA_MPS_LOG_DIRECTORY=$WORK/mps-log")
        ;;
    mpsshim)
        ENVP+=("MPSSHIM_PIPE_DIRECTORY=$WORK/shim-pipe" "MPSSHIM_LOG_DIRECTORY=$WORK/shim-log"
            "LD_PRELOAD=$SHIM${LD_PRELOAD:+:$LD_PRELOAD}")
        [ "$CPU" = 1 ] && ENVP+=("MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1")
        ;;
    esac
}

# ---------------------------------------------------------------- daemons

start_mps() {
    mkdir -p "$WORK/mps-pipe" "$WORK/mps-log"
    MPS_UP=1 # before the start: a daemon that started but did not answer is stopped too
    # The control daemon starts nvidia-cuda-mps-server, found beside it.
    env CUDA_MPS_PIPE_DIRECTORY="$WORK/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$WORK/mps-log" \
        PATH="$(dirname "$MPS_CTL"):$PATH" timeout 40 "$MPS_CTL" -d
}

stop_mps() {
    [ "$MPS_UP" = 1 ] || return 0
    echo quit | timeout 20 env CUDA_MPS_PIPE_DIRECTORY="$WORK/mps-pipe" "$MPS_CTL" >/dev/null 2>&1
    MPS_UP=0
}

start_shim() {
    mkdir -p "$WORK/shim-pipe" "$WORK/shim-log"
    SHIM_UP=1 # before the start, as for MPS
    local drv=()
    [ "$CPU" = 1 ] && drv=("MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1")
    # No CUDA_MPS_* here: the server must not become a client of a native MPS.
    env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY -u LD_PRELOAD \
        MPSSHIM_PIPE_DIRECTORY="$WORK/shim-pipe" MPSSHIM_LOG_DIRECTORY="$WORK/shim-log" \
        "${drv[@]}" timeout 40 "$SHIM_CTL" -d
}

# Asks the server to quit; waits (10 s) for it to exit, then ends it by its pid.
stop_shim() {
    [ "$SHIM_UP" = 1 ] || return 0
    local pid
    pid=$(cat "$WORK/shim-pipe/server.pid" 2>/dev/null)
    echo quit | timeout 20 env MPSSHIM_PIPE_DIRECTORY="$WORK/shim-pipe" "$SHIM_CTL" >/dev/null 2>&1
    SHIM_UP=0
    [ -n "$pid" ] || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    say "mpsshim server $pid did not quit in 10 s: sending SIGTERM"
    kill "$pid" 2>/dev/null
    return 1
}

# Stops what this script started; then lets tee write the last of the summary.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    stop_shim >/dev/null 2>&1
    stop_mps
    [ -n "$WORK" ] && rm -rf "$WORK"
    exec 1>&3 2>&4
    [ -n "$TEE_PID" ] && wait "$TEE_PID" 2>/dev/null
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

# wait_all PID...: waits for background runs; when one fails, ends the others (they would
# wait for it at the barrier). Returns 0 when every one exited 0.
wait_all() {
    local rc=0 st finished pid rest=("$@") keep
    while [ "${#rest[@]}" -gt 0 ]; do
        finished=
        wait -n -p finished "${rest[@]}"
        st=$?
        [ -n "$finished" ] || break
        keep=()
        for pid in "${rest[@]}"; do [ "$pid" = "$finished" ] || keep+=("$pid"); done
        rest=("${keep[@]}")
        if [ "$st" != 0 ] && [ "$rc" = 0 ]; then
            rc=$st
            [ "${#rest[@]}" = 0 ] || kill "${rest[@]}" 2>/dev/null
        fi
    done
    BG_PIDS=()
    return "$rc"
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
    local mode=$1 base now p f daemon_log=
    : >"$OUTDIR/bench-$mode.log"
    say "== $mode"
    if [ "$mode" = mps ] && { [ "$CPU" = 1 ] || [ -z "$MPS_CTL" ]; }; then
        if [ "$CPU" = 1 ]; then say "  skipped: CPU test driver"; else say "  skipped: no MPS"; fi |
            tee -a "$OUTDIR/bench-$mode.log"
        all_na "$mode"
        return
    fi
    base=$(gpu_mem)
    if [ "$mode" = mps ]; then
        start_mps >>"$OUTDIR/bench-$mode.log" 2>&1 || {
            say "  nvidia-cuda-mps-control -d failed"
            stop_mps
            all_fail "$mode"
            return
        }
        daemon_log=$WORK/mps-log
    elif [ "$mode" = mpsshim ]; then
        start_shim >>"$OUTDIR/bench-$mode.log" 2>&1 || {
            say "  mpsshim-control -d failed: see bench-$mode.log"
            cat "$WORK/shim-log/server.log" >>"$OUTDIR/bench-$mode.log" 2>/dev/null
            stop_shim
            all_fail "$mode"
            return
        }
        daemon_log=$WORK/shim-log
        now=$(gpu_mem)
        say "server up; GPU memory ${base:-n/a} MiB before it, ${now:-n/a} MiB now" \
            >>"$OUTDIR/bench-$mode.log"
    fi
    mode_env "$mode"
    bench_idle "$mode" "$base"
    bench_calls "$mode"
    for p in $OVERLAP_PROCS; do bench_overlap "$mode" "$p"; done
    stop_mps
    stop_shim
    if [ -n "$daemon_log" ]; then
        for f in "$daemon_log"/*; do
            [ -f "$f" ] || continue
            say "=== $mode daemon: $(basename "$f")"
            cat "$f"
        done >>"$OUTDIR/bench-$mode.log"
    fi
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
    WORK=$(mktemp -d /tmp/mpsshim-bench-work.XXXXXX) || exit 2
    # Our own pipe and log directories only: nothing may reach a daemon started elsewhere.
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY MPSSHIM_PIPE_DIRECTORY \
        MPSSHIM_LOG_DIRECTORY
    [ "$CPU" = 1 ] && unset MPSSHIM_DRIVER

    say "mpsshim benchmarks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs," \
        "commit $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')$(
            [ "$QUICK" = 1 ] && echo ', QUICK (smoke run)')"
    if [ "$CPU" = 1 ]; then
        say "!!! MPSSHIM_BENCH_CPU=1: native and mpsshim on the CPU TEST DRIVER, no MPS. These"
        say "!!! numbers only test this script: they have NO meaning for GPUs. !!!"
        if [ ! -e "$B/cpudrv/libcuda.so.1" ]; then
            say "no CPU test driver at $B/cpudrv/libcuda.so.1"
            exit 1
        fi
    else
        nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_mode \
            --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
        MPS_CTL=$(command -v nvidia-cuda-mps-control 2>/dev/null)
        [ -n "$MPS_CTL" ] || [ ! -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] ||
            MPS_CTL=/usr/local/nvidia/bin/nvidia-cuda-mps-control
        say "native MPS: ${MPS_CTL:-not found (its column is n/a)}"
        [ -S /tmp/nvidia-mps/control ] &&
            say "warning: an MPS control daemon may be running in /tmp/nvidia-mps"
    fi
    local e
    for e in $(compgen -e | grep -E '^(MPSSHIM_|CUDA_)' | grep -v '^MPSSHIM_BENCH_CPU$'); do
        say "environment: $e=${!e}"
    done
    local missing=
    for e in bench/callbench bench/overlap bench/spin.ptx tests/kernels.ptx libmpsshim.so \
        mpsshim-control mpsshim-server; do
        [ -e "$B/$e" ] || missing="$missing $B/$e"
    done
    [ -z "$missing" ] || { say "missing (run make):$missing"; exit 1; }
    say "raw outputs: $OUTDIR"

    local mode
    for mode in $MODES; do run_mode "$mode"; done
    say "benchmarks took $SECONDS s"
    print_table
    [ "$FAILED" = 0 ] || { say "some runs FAILED: see the bench-*.log files"; exit 1; }
}

# Everything printed also goes to bench-summary.txt.
exec 3>&1 4>&2
exec > >(tee "$OUTDIR/bench-summary.txt") 2>&1
TEE_PID=$!
trap cleanup EXIT
trap 'exit 130' INT TERM
main
