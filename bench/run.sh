#!/usr/bin/env bash
# Benchmarks (`make bench`): every figure natively, under native MPS and under mpsshim, on the
# same GPU in one run, each repeated (5 times unless --repeats says otherwise): GPU memory of
# idle processes, per-call costs, copy bandwidth by size, overlap of 1-32 processes, an MPI
# job of 1-16 ranks, a PyTorch inference fleet of 1-32 processes, managed memory,
# cuMemFree beside another process's kernels (bench/freewait), a driver-API fleet of 1-32
# processes (bench/fleetc), cold MPI jobs of 8-32 ranks (a fresh job per sample, its first
# launches timed; over 2 GPUs too where there are two); then the SM-share table
# (bench/throttle.sh). Writes the raw samples, a table (markdown and tsv) and, where
# matplotlib is (else installed: Debian's python3-matplotlib, or pip's), PNG plots.
# bench/README.md says what each figure means, how it is measured and how long a run takes.
#
# usage: bench/run.sh [BUILD_DIR] [--quick] [--repeats N] [--no-plots] [--no-throttle]
#                      [--families F,F...] [--points F=X,X...]... [--variant NAME:VAR=VAL[,VAR=VAL...]]...
#                      [--pack] [--fleetc-spread]
#   --quick              smoke run: fewer points and iterations, 2 repeats; not the figures
#   --families F,...     only these of idle calls copy overlap mpi fleet managed free fleetc
#                        mpicold (in that order), for a short GPU session; the SM-share table
#                        needs --no-throttle to be left out too
#   --points F=X,X,...   the processes or ranks family F (overlap mpi mpicold fleet fleetc)
#                        measures, in place of its default (or --quick's); repeatable
#   --variant NAME:VAR=VAL,...  one more mode, mpsshim-NAME (NAME of a-z 0-9 _): mpsshim
#                        with a server (and clients) given those variables (values without
#                        commas), e.g. conn32:CUDA_DEVICE_MAX_CONNECTIONS=32; repeatable.
#                        Variants run after mpsshim in every family, each with a fresh
#                        server, and get a column of the table and dashed lines in the plots;
#                        MPSSHIM_BENCH_SERVERS=K (1-8) spreads the variant's processes over K
#                        servers instead (bench/README.md)
#   --no-plots           table only (bench/plot.py DIR draws the plots later, elsewhere)
#   --pack               the logs and plots into one bench-logs.tgz at the end, so that the
#                        results folder is 8 files (what a GPU session's $OUT brings back)
#   --fleetc-spread      fleetc's host work comes between its launches (fleetc --spread), as
#                        an interpreter's does, in place of before them; the figure says so
#   OUT=DIR              results go there, else to a new temp dir
#   MPSSHIM_BENCH_BUDGET=S  no measurement starts, nor runs on, after S s (default 420)
#   MPSSHIM_BENCH_COMMIT=C  the commit the results name (else git describe of the checkout)
#   MPSSHIM_BENCH_CPU=1  native and mpsshim on the CPU test driver, to test this script
#                        without a GPU; such numbers say nothing about GPUs
#   MPSSHIM_BENCH_FAIL=MODE.RUN  that run fails after it ran (e.g. mpsshim.calls1, the first
#                        calls run; mps.overlap4; mpsshim.mpi2): tests the failure paths
# Never changes GPU settings. Exits non-zero if any run failed; the table is written anyway,
# each cell from the runs that measured, with the count of those that failed.
set -u

B=${1:-build}
[ $# -gt 0 ] && shift
QUICK=0 PLOTS=1 THROTTLE=1 REPEATS='' ONLY='' PACK=0 FLEETC_SPREAD=0 VARIANTS=()
declare -A POINTS=()
usage() {
    [ -z "${1:-}" ] || echo "bench/run.sh: $1" >&2
    echo "usage: bench/run.sh [BUILD_DIR] [--quick] [--repeats N] [--no-plots] [--no-throttle]" \
        "[--families F,F...] [--points F=X,X...]... [--variant NAME:VAR=VAL[,VAR=VAL...]]..." \
        "[--pack]" >&2
    exit 2
}
# variant_ok NAME:VAR=VAL,...: refuses (usage) a malformed or repeated variant, and variables
# that would take the mode's clients or server away from the bench's own daemon.
variant_ok() {
    local a v
    [[ $1 =~ ^([a-z0-9_]+):(.+)$ ]] || usage "--variant $1: not NAME:VAR=VAL[,VAR=VAL...]"
    for v in "${VARIANTS[@]}"; do
        [ "${v%%:*}" != "${BASH_REMATCH[1]}" ] || usage "--variant ${BASH_REMATCH[1]} given twice"
    done
    IFS=, read -ra a <<<"${BASH_REMATCH[2]}"
    for v in "${a[@]}"; do
        [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || usage "--variant $1: '$v' is not VAR=VAL"
        case ${v%%=*} in
        MPSSHIM_BENCH_SERVERS)
            [[ ${v#*=} =~ ^[1-8]$ ]] || usage "--variant $1: MPSSHIM_BENCH_SERVERS is 1 to 8" ;;
        LD_PRELOAD | MPSSHIM_PIPE_DIRECTORY | MPSSHIM_LOG_DIRECTORY | CUDA_MPS_PIPE_DIRECTORY | \
            CUDA_MPS_LOG_DIRECTORY | MPSSHIM_DRIVER | MPSSHIM_BENCH_*)
            usage "--variant $1: ${v%%=*} is the bench's own" ;;
        esac
    done
}
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --no-plots) PLOTS=0 ;;
    --pack) PACK=1 ;;
    --no-throttle) THROTTLE=0 ;;
    --fleetc-spread) FLEETC_SPREAD=1 ;;
    --families)
        [[ ${2:-} =~ ^[a-z]+(,[a-z]+)*$ ]] || usage
        ONLY=${2//,/ }
        shift
        ;;
    --points)
        [[ ${2:-} =~ ^(overlap|mpi|mpicold|fleet|fleetc)=[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
            usage "--points ${2:-}: not F=X,X... (F one of overlap mpi mpicold fleet fleetc)"
        POINTS[${2%%=*}]=${2#*=}
        shift
        ;;
    --repeats)
        [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage
        REPEATS=$2
        shift
        ;;
    --variant)
        variant_ok "${2:-}"
        VARIANTS+=("$2")
        shift
        ;;
    *) usage ;;
    esac
    shift
done
B=$(cd "$B" && pwd) || exit 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init bench

# The whole run starts no measurement after BUDGET s and cuts any at BUDGET s, so that it
# fits one 10-minute command on the GPU machine with its build; a full run on an H100 should
# take about 5 to 6 minutes (bench/README.md gives the estimate).
BUDGET=${MPSSHIM_BENCH_BUDGET:-420}
CALL_METRICS="launch_async_us launch_sync_us launch_ctxsync_us stream_query_us memcpy_4b_htod_us memcpy_4b_dtoh_us
    alloc_free_4k_us alloc_free_64m_us"
MANAGED_METRICS="managed_gpu_s managed_pingpong_s managed_prefetch_s"
FREE_METRICS="free_max_ms free_mean_ms"
COPY_KINDS="htod_pageable dtoh_pageable htod_pinned dtoh_pinned htod_registered dtoh_registered"
MPI_STEPS=400
# The cold MPI job (bench/mpi_steps --cold, issue 29): US:LAUNCHES per shape, each shape a
# figure mpi_coldUS_s over MPICOLD_RANKS; those of MPICOLD_2GPU also spread over two GPUs
# (mpi_coldUS_2gpu_s) where the machine has two. Each sample is a job of its own.
MPICOLD_ARGS=(--cold --blocks 4 --threads 128 --sync-every 50 --sync-barrier)
MPICOLD_2GPU="75"
if [ "$QUICK" = 1 ]; then
    : "${REPEATS:=2}"
    OVERLAP_PROCS="1 4" MPI_RANKS="1 2" FLEET_PROCS="1 2" FLEETC_PROCS="1 2"
    MPICOLD_RANKS="2 4" MPICOLD_SHAPES="75:100 540:50"
    CALL_ARGS=(--quick) COPY_MAX=4 FLEET_SECONDS=0.2 MPI_STEPS=100
    MANAGED_ARGS=(--mib 4 --steps 10 --rounds 3)
    FREE_ARGS=(--kernels 4 --ms 20 --pairs 3)
else
    : "${REPEATS:=5}"
    OVERLAP_PROCS="1 2 4 8 16 32" MPI_RANKS="1 2 4 8 16" FLEET_PROCS="1 2 4 8 16 32"
    FLEETC_PROCS="1 2 4 8 16 32"
    MPICOLD_RANKS="8 16 32" MPICOLD_SHAPES="75:400 540:100"
    CALL_ARGS=() COPY_MAX=256 FLEET_SECONDS=1
    MANAGED_ARGS=(--mib 64 --steps 100 --rounds 10)
    FREE_ARGS=(--kernels 10 --ms 20 --pairs 10)
fi
[ -z "${POINTS[overlap]:-}" ] || OVERLAP_PROCS=${POINTS[overlap]//,/ }
[ -z "${POINTS[mpi]:-}" ] || MPI_RANKS=${POINTS[mpi]//,/ }
[ -z "${POINTS[mpicold]:-}" ] || MPICOLD_RANKS=${POINTS[mpicold]//,/ }
[ -z "${POINTS[fleet]:-}" ] || FLEET_PROCS=${POINTS[fleet]//,/ }
[ -z "${POINTS[fleetc]:-}" ] || FLEETC_PROCS=${POINTS[fleetc]//,/ }
# The CPU test driver has no spin_ns; its delay_set sleeps like the GPU's spins. It cannot
# run PyTorch: the fleet runs fake steps there (bench/fleet.py --fake), to test the plumbing.
if [ "$CPU" = 1 ]; then KERNEL_ARGS=(--kernel delay_set) FLEET_ARGS=(--fake); else
    KERNEL_ARGS=() FLEET_ARGS=()
fi
IDLE_PROCS=8
# A driver-API fleet step (bench/fleetc): host work, empty launches, a 4-byte read back.
FLEETC_ARGS=(--work-us 100 --launches 8)
[ "$FLEETC_SPREAD" = 0 ] || FLEETC_ARGS+=(--spread)
# mpsshim first: a run cut by its budget loses native's last figures, not mpsshim's. Its
# variants next (lib.sh's MODE_VARS: their variables), before the modes they are compared with.
MODES=mpsshim
for v in "${VARIANTS[@]}"; do
    MODES="$MODES mpsshim-${v%%:*}"
    MODE_VARS["mpsshim-${v%%:*}"]=${v#*:}
done
MODES="$MODES mps native"
# fleetc, then mpicold, last: a run of every family outlasts the default budget
# (bench/README.md), and what the budget cuts should be the newest figures rather than the
# reference run's.
FAMILIES="idle calls copy overlap mpi fleet managed free fleetc mpicold"
if [ -n "$ONLY" ]; then
    for f in $ONLY; do [[ " $FAMILIES " == *" $f "* ]] || usage; done
    kept=""
    for f in $FAMILIES; do [[ " $ONLY " == *" $f "* ]] && kept="$kept $f"; done
    FAMILIES=${kept# }
fi
SAMPLES=$OUTDIR/bench-samples.tsv
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
MPI_BIN=$B/bench/mpi_steps
# GPUs the run may use (the CPU test driver's: MPSSHIM_CPUDRV_DEVICES), for the 2-GPU figures:
# the machine's, or as many as CUDA_VISIBLE_DEVICES names where it is set (a run held to one
# GPU of two would otherwise ask its jobs for a second they cannot see).
if [ "$CPU" = 1 ]; then NGPUS=${MPSSHIM_CPUDRV_DEVICES:-1}; else
    NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
        named=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .)
        [ "$named" -ge "$NGPUS" ] || NGPUS=$named
    fi
fi
MPI_WHY='' FLEET_WHY=''
FAILED=0
INJECT=${MPSSHIM_BENCH_FAIL:-}
# The run under way (MODE NAME) until its outputs are in its mode's log, and the mode whose
# daemon is up: what an interrupted run still saves (interrupted, below).
INFLIGHT=()
FAM_MODE=
PACKED=0

# sample FIGURE X MODE REPEAT VALUE UNIT: one line of the raw results; FAIL fails the run.
sample() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$SAMPLES"
    [ "$5" = FAIL ] && FAILED=1
    return 0
}

# figures: what each figure is (bench-figures.tsv: name, unit, better, x, description).
figures() {
    local o=200 ob=2 ous=100
    [ "$CPU" = 1 ] && ob="1 (delay_set: block 0)"
    {
        printf 'figure\tunit\tbetter\tx\twhat\n'
        printf 'idle%s_MiB\tMiB\tlower\t\t%s\n' "$IDLE_PROCS" "GPU memory in use with $IDLE_PROCS idle CUDA processes (tests/hold), over the memory in use before the mode's daemon started (nvidia-smi); once per mode"
        printf 'launch_async_us\tus\tlower\t\tcuLaunchKernel of an empty kernel, back to back on one stream, drained: time per launch (callbench; median of its batches)\n'
        printf 'launch_sync_us\tus\tlower\t\tone launch then cuStreamSynchronize (callbench; median round trip)\n'
        printf 'launch_ctxsync_us\tus\tlower\t\tone launch then cuCtxSynchronize, as cudaDeviceSynchronize (callbench; median round trip)\n'
        printf 'first_launch_sync_us\tus\tlower\t\tlaunch_sync_us of the first process on the mode'"'"'s daemon just started (through mpsshim: while the server makes its quiet context); the per-call figures are the processes'"'"' after it (callbench)\n'
        printf 'stream_query_us\tus\tlower\t\tcuStreamQuery on an idle stream (callbench; median)\n'
        printf 'memcpy_4b_htod_us\tus\tlower\t\t4-byte cuMemcpyHtoD from malloc memory (callbench; median)\n'
        printf 'memcpy_4b_dtoh_us\tus\tlower\t\t4-byte cuMemcpyDtoH to malloc memory (callbench; median)\n'
        printf 'alloc_free_4k_us\tus\tlower\t\tcuMemAlloc of 4 KiB and its cuMemFree on an idle device (callbench; median pair)\n'
        printf 'alloc_free_64m_us\tus\tlower\t\tcuMemAlloc of 64 MiB and its cuMemFree on an idle device (callbench; median pair)\n'
        for k in $COPY_KINDS; do
            printf 'copy_%s_GBps\tGB/s\thigher\tbytes\tsynchronous %s copy of x bytes (%s host memory), median of a run'"'"'s copies (copysweep); GB = 1e9 B\n' \
                "$k" "${k%_*}" "${k#*_}"
        done
        printf 'overlap_s\ts\tlower\tprocesses\t%s\n' "x processes at once, each $o launches of $ob blocks x $ous us spinning on a stream of its own, then a synchronize; started together at a barrier; the slowest process's time (overlap). Kernels that really overlap stay near $((o * ous / 1000)) ms; time-sliced contexts take about x times it"
        printf 'mpi_gpu_loop_s\ts\tlower\tranks\t%s\n' "an MPI job of x ranks (mpirun, one node), each $MPI_STEPS steps of a 4-block kernel spinning 75 us plus an increment of its share, one cuStreamSynchronize at the end; ranks start at MPI_Barrier; the slowest rank's GPU loop (mpi_steps)"
        printf 'fleet_steps_per_s\tsteps/s\thigher\tprocesses\t%s\n' "x PyTorch processes at once, each running a small conv net on batches of 8 with one .item() per step for $FLEET_SECONDS s from a common barrier: the sum of their steps/s (fleet.py)"
        printf 'fleet_cpu_us\tus\tlower\tprocesses\t%s\n' "the PyTorch fleet of x processes: the CPU time the whole machine spent per step of the fleet over the window (busy CPUs from /proc/stat over the fleet's steps/s): clients, server threads and all; where CPUs are all busy it sets the fleet's pace (fleet.py)"
        printf 'fleet_client_cpu_us\tus\tlower\tprocesses\t%s\n' "the PyTorch fleet of x processes: one process's own CPU time per step over the window, all its threads, the mean over the processes (through mpsshim the rest of a step's work is its server worker's: fleet_cpu_us has both) (fleet.py)"
        printf 'fleet_start_s\ts\tlower\tprocesses\t%s\n' "x PyTorch processes started together (x = 1: one alone): from the script's start to the result of its first step (import torch, CUDA init, net to GPU, first step), the slowest process's; once per mode and x"
        printf 'fleetc_cpu_us\tus\tlower\tprocesses\t%s\n' "the driver-API fleet of x processes (fleetc, above): the CPU time the whole machine spent per step of the fleet over the window (busy CPUs from /proc/stat, the mean of the processes' readings, over the fleet's steps/s): clients, server threads and all"
        printf 'fleetc_client_cpu_us\tus\tlower\tprocesses\t%s\n' "the driver-API fleet of x processes: one process's own CPU time per step over the window, its host work and all its threads, the mean over the processes (fleetc)"
        printf 'fleetc_steps_per_s\tsteps/s\thigher\tprocesses\t%s\n' "x processes at once (bench/fleetc, driver API), each step ${FLEETC_ARGS[1]} us of host work${FLEETC_ARGS[4]:+ spread between}, ${FLEETC_ARGS[3]} launches of an empty kernel and a 4-byte cuMemcpyDtoH, for $FLEET_SECONDS s from a common barrier: the sum of their steps/s"
        local shape us n
        for shape in $MPICOLD_SHAPES; do
            us=${shape%%:*} n=${shape#*:}
            printf 'mpi_cold%s_s\ts\tlower\tranks\t%s\n' "$us" "a cold MPI job of x ranks on one GPU (a fresh mpirun per sample; server daemons already up): each rank a chain of $n launches of a 4-block x 128-thread kernel spinning $us us, plus an increment of its share, cuStreamSynchronize and MPI_Barrier every 50; images loaded as libraries at start, no launch before the timing, which runs from the barrier before the first launch to the end of the last synchronize; the slowest rank's (mpi_steps --cold)"
            [[ " $MPICOLD_2GPU " == *" $us "* ]] || continue
            printf 'mpi_cold%s_2gpu_s\ts\tlower\tranks\t%s\n' "$us" "the same cold MPI job ($n launches of $us us) with its x ranks over two GPUs (rank r on device r % 2, x/2 a GPU); n/a on a machine of one GPU"
        done
        printf 'managed_gpu_s\ts\tlower\t\t%s\n' "${MANAGED_ARGS[*]}: the GPU phase of a managed-memory program (bench/managed): saxpy launches back to back over two managed arrays the CPU wrote, one synchronize"
        printf 'managed_pingpong_s\ts\tlower\t\t%s\n' "${MANAGED_ARGS[*]}: rounds of one saxpy, a synchronize and a CPU pass over the array, on managed memory (bench/managed)"
        printf 'managed_prefetch_s\ts\tlower\t\t%s\n' "${MANAGED_ARGS[*]}: the same rounds with cuMemPrefetchAsync to the device before each launch and to the host before each CPU pass (bench/managed)"
        printf 'free_max_ms\tms\tlower\t\t%s\n' "${FREE_ARGS[*]}: the longest of a process's cuMemFree calls (1 MiB, 10 ms apart) while another process runs one-block kernels back to back (bench/freewait)"
        printf 'free_mean_ms\tms\tlower\t\t%s\n' "${FREE_ARGS[*]}: the mean of those cuMemFree calls (bench/freewait)"
    } >"$OUTDIR/bench-figures.tsv"
}

# GPU memory in use, MiB, summed over the GPUs; empty without nvidia-smi.
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

# record MODE NAME RC: appends the whole outputs of a run ($WORK/MODE.NAME*.out), failed or
# not, to the mode's log (which --pack keeps).
record() {
    local f
    {
        say "=== $1 $2: exit $3"
        for f in "$WORK/$1.$2".*out; do
            [ -f "$f" ] || continue
            say "--- $(basename "$f")"
            cat "$f"
        done
        say
    } >>"$OUTDIR/bench-$1.log"
    INFLIGHT=()
}

# injected MODE NAME RC: RC, or 3 with a FAIL line added to the run's first output when
# MPSSHIM_BENCH_FAIL names this run (a failure on purpose, for the tests of this script).
injected() {
    if [ "$1.$2" = "$INJECT" ]; then
        say "FAIL bench/run.sh: failed on purpose (MPSSHIM_BENCH_FAIL=$INJECT)" >>"$WORK/$1.$2.1.out"
        echo 3
        return
    fi
    echo "$3"
}

# failed MODE NAME RC: says that a run failed, with the first distinct failure lines of its
# outputs and where the whole of them is.
failed() {
    if [ "$3" = budget ]; then
        say "  $1 $2: not run, the time budget is spent"
        return
    fi
    say "  $1 $2 failed ($3); its whole output: bench-$1.log, after '=== $1 $2: exit $3'"
    cat "$WORK/$1.$2".*out 2>/dev/null | grep -v '^#' | grep -E 'FAIL|rror|Abort' | sort |
        uniq -c | head -n 5
}

# spend SECS: SECS, or what the budget has left; 0 when under 5 s are left.
spend() {
    local s
    s=$(limit "$1")
    [ "$s" -ge 5 ] && { echo "$s"; return; }
    echo 0
}

# group MODE NAME SECS CMD...: runs CMD (words; "%i" becomes the process number 1..) once per
# process, PROCS of them at once, each output in $WORK/MODE.NAME.<i>.out; returns wait_all's.
group() {
    local mode=$1 name=$2 secs=$3 i pids=() w words
    shift 3
    rm -f "$WORK/$mode.$name".*out
    INFLIGHT=("$mode" "$name")
    for i in $(seq "$PROCS"); do
        words=()
        for w in "$@"; do words+=("${w//%i/$((i - 1))}"); done
        proc_env "$i"
        timeout -k 5 "$secs" "${ENVP[@]}" "${PROCENV[@]}" "${words[@]}" \
            >"$WORK/$mode.$name.$i.out" 2>&1 &
        pids+=($!)
    done
    BG_PIDS=("${pids[@]}")
    wait_all "${pids[@]}"
    i=$?
    return "$(injected "$mode" "$name" "$i")"
}

# per_repeat FILE AGG METRIC: for each repeat 1..REPEATS, AGG (max or sum) over the outputs in FILE of
# METRIC's value with that repeat (`metric METRIC V UNIT R`), or FAIL when a file lacks it.
per_repeat() {
    awk -v agg="$2" -v m="$3" -v n="$PROCS" -v R="$REPEATS" '
        $1 == "metric" && $2 == m { c[$5]++; v = $3 + 0
            if (agg == "sum") a[$5] += v; else if (!($5 in a) || v > a[$5]) a[$5] = v }
        END { for (r = 1; r <= R; r++) print r, (c[r] == n ? a[r] : "FAIL") }' "$1"
}

# ---------------------------------------------------------------- the families

# fam_idle MODE: GPU memory of IDLE_PROCS idle processes (tests/hold) over BASE, the memory in
# use before this mode's daemon started (so a server's context counts).
fam_idle() {
    local mode=$1 secs i pids=() ready=0 used rc=0 hold=$B/tests/hold fig=idle${IDLE_PROCS}_MiB
    secs=$(spend 60)
    if [ ! -x "$hold" ] || [ "$secs" = 0 ]; then
        say "  idle: skipped (${hold} missing or time budget spent)"
        sample "$fig" - "$mode" 1 FAIL MiB
        return
    fi
    INFLIGHT=("$mode" idle)
    for i in $(seq "$IDLE_PROCS"); do
        proc_env "$i"
        timeout -k 5 "$secs" "${ENVP[@]}" "${PROCENV[@]}" "$hold" 30 >"$WORK/$mode.idle.$i.out" 2>&1 &
        pids+=($!)
    done
    BG_PIDS=("${pids[@]}")
    # Until every one printed `ready`, or one exited (it failed), or the time is up.
    for _ in $(seq $((secs * 10))); do
        ready=0
        for i in $(seq "$IDLE_PROCS"); do
            grep -q '^ready' "$WORK/$mode.idle.$i.out" && ready=$((ready + 1))
        done
        [ "$ready" = "$IDLE_PROCS" ] && break
        for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null || rc=1; done
        [ "$rc" = 0 ] || break
        sleep 0.1
    done
    if [ "$ready" = "$IDLE_PROCS" ]; then
        [ "$CPU" = 1 ] || sleep 1 # (the CPU test driver has no memory to read)
        used=$(gpu_mem)
    else
        rc=1
    fi
    kill "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    BG_PIDS=()
    say "$ready of $IDLE_PROCS ready; GPU memory before the mode ${BASE:-n/a} MiB, with them" \
        "${used:-n/a} MiB" >"$WORK/$mode.idle.sum.out"
    record "$mode" idle "$rc"
    if [ "$rc" != 0 ]; then
        sample "$fig" - "$mode" 1 FAIL MiB
        say "  idle: $ready of $IDLE_PROCS hold processes got ready"
    elif [ -n "$BASE" ] && [ -n "$used" ]; then
        sample "$fig" - "$mode" 1 $((used - BASE)) MiB
    else
        sample "$fig" - "$mode" 1 n/a MiB
    fi
}

# measure MODE NAME SECS CMD...: one measured group (group, then record); its status in RC,
# "budget" when SECS is 0 (the time budget is spent: nothing runs).
measure() {
    local mode=$1 name=$2 secs=$3
    shift 3
    RC=budget
    [ "$secs" = 0 ] && return
    group "$mode" "$name" "$secs" "$@"
    RC=$?
    record "$mode" "$name" "$RC"
}

# runs_family MODE NAME UNIT METRICS CMD...: REPEATS runs of CMD, one after the other; each
# gives one sample of every metric of METRICS (`metric NAME VALUE UNIT` lines it prints).
runs_family() {
    local mode=$1 name=$2 unit=$3 metrics=$4 r secs rc m v
    shift 4
    for r in $(seq "$REPEATS"); do
        secs=$(spend 60)
        PROCS=1
        measure "$mode" "$name$r" "$secs" "$@"
        rc=$RC
        for m in $metrics; do
            v=$(awk -v m="$m" '$1 == "metric" && $2 == m { print $3 }' \
                "$WORK/$mode.$name$r.1.out" 2>/dev/null)
            [ "$rc" = 0 ] || v=
            sample "$m" - "$mode" "$r" "${v:-FAIL}" "$unit"
        done
        [ "$rc" = 0 ] || failed "$mode" "$name$r" "$rc"
    done
}

# fam_calls MODE: the per-call figures (callbench). The mode's first process on its daemon
# runs apart (calls0), its launch + sync a figure of its own (first_launch_sync_us): through
# mpsshim it meets the server's quiet context being made (0.6-0.7 s from its first load of code
# on an H200, its replies from the worker till then: bench/results/issue29-2026-11-28, "Start-up's
# phases"), which would otherwise be one of REPEATS samples of the per-call figures. It runs
# every metric, so that the making is over before the runs of record start.
fam_calls() {
    local secs rc v
    secs=$(spend 60)
    PROCS=1
    # shellcheck disable=SC2086 # metric names are words
    measure "$1" calls0 "$secs" "$B/bench/callbench" "${CALL_ARGS[@]}" $CALL_METRICS
    rc=$RC
    v=$(awk '$1 == "metric" && $2 == "launch_sync_us" { print $3 }' "$WORK/$1.calls0.1.out" 2>/dev/null)
    [ "$rc" = 0 ] || v=
    sample first_launch_sync_us - "$1" 1 "${v:-FAIL}" us
    [ "$rc" = 0 ] || failed "$1" calls0 "$rc"
    # shellcheck disable=SC2086 # metric names are words
    runs_family "$1" calls us "$CALL_METRICS" "$B/bench/callbench" "${CALL_ARGS[@]}" $CALL_METRICS
}

# fam_managed MODE: the managed-memory program's phases (bench/managed).
fam_managed() {
    runs_family "$1" managed s "$MANAGED_METRICS" "$B/bench/managed" "${MANAGED_ARGS[@]}"
}

# fam_copy MODE: REPEATS runs of copysweep; each gives one sample of every size and kind.
fam_copy() {
    local mode=$1 r secs rc k x v
    for r in $(seq "$REPEATS"); do
        secs=$(spend 60)
        PROCS=1
        measure "$mode" "copy$r" "$secs" "$B/bench/copysweep" --max "$COPY_MAX"
        rc=$RC
        if [ "$rc" = 0 ]; then
            while read -r k x v; do
                sample "copy_${k}_GBps" "$x" "$mode" "$r" "$v" GB/s
            done < <(awk '$1 == "metric" { n = split($2, p, "_")
                print p[2] "_" p[3], p[4], $3 }' "$WORK/$mode.copy$r.1.out")
        else
            # Every row of the sweep: a failed run counts in each (its measurements are in
            # the log, not in the table).
            for k in $COPY_KINDS; do
                for ((x = 4096; x <= COPY_MAX << 20; x *= 4)); do
                    sample "copy_${k}_GBps" "$x" "$mode" "$r" FAIL GB/s
                done
            done
            failed "$mode" "copy$r" "$rc"
        fi
    done
}

# repeats_to_samples MODE NAME FIGURE X UNIT RC AGG METRIC: one sample per repeat from the
# group's outputs (all FAIL when RC is not 0).
repeats_to_samples() {
    local mode=$1 name=$2 fig=$3 x=$4 unit=$5 rc=$6 r v
    while read -r r v; do
        [ "$rc" = 0 ] || v=FAIL
        sample "$fig" "$x" "$mode" "$r" "$v" "$unit"
    done < <(per_repeat <(cat "$WORK/$mode.$name".*.out 2>/dev/null) "$7" "$8")
    [ "$rc" = 0 ] || failed "$mode" "$name" "$rc"
}

# fam_overlap MODE: for each P of OVERLAP_PROCS, P overlap processes at once, REPEATS rounds.
fam_overlap() {
    local mode=$1 p secs rc
    for p in $OVERLAP_PROCS; do
        secs=$(spend 90)
        PROCS=$p
        rm -f "$WORK/barrier"
        measure "$mode" "overlap$p" "$secs" "$B/bench/overlap" "${KERNEL_ARGS[@]}" \
            --barrier "$WORK/barrier" --procs "$p" --repeats "$REPEATS"
        rc=$RC
        repeats_to_samples "$mode" "overlap$p" overlap_s "$p" s "$rc" max kernel_time_s
    done
}

# mpi_missing: why the MPI job cannot run here (MPI_WHY), or nothing. A build made on a
# machine without mpicc (and carried to the GPU machine) lacks mpi_steps: it is built here
# then, with bench/bench.mk's command, when this machine has mpicc.
mpi_missing() {
    if [ "$CPU" = 1 ] && ! command -v mpirun >/dev/null; then
        # The CPU test driver without an MPI: bench/fakempi's stand-in, to test the plumbing.
        MPIRUN=("$ROOT/bench/fakempi/mpirun")
        MPI_BIN=$B/bench/mpi_steps_fakempi
        [ -x "$MPI_BIN" ] || MPI_WHY="$MPI_BIN not built (run make)"
        [ -n "$MPI_WHY" ] || say "MPI jobs: bench/fakempi (no mpirun here), to test the plumbing"
    elif ! command -v mpirun >/dev/null; then
        MPI_WHY="no mpirun on PATH"
    elif [ ! -x "$B/bench/mpi_steps" ] && command -v mpicc >/dev/null &&
        (cd "$ROOT" && mpicc -O2 -g -std=gnu11 -pthread -I"${CUDA:-/usr/local/cuda}/include" -I. \
            -o "$B/bench/mpi_steps" bench/mpi_steps.c bench/common.c -pthread \
            -L"${CUDA:-/usr/local/cuda}/lib64/stubs" -lcuda) >"$B/bench/mpi_steps.build.log" 2>&1; then
        say "MPI job: built $B/bench/mpi_steps with this machine's mpicc"
    elif [ ! -x "$B/bench/mpi_steps" ]; then
        MPI_WHY="$B/bench/mpi_steps not built (no mpicc, or it failed: $B/bench/mpi_steps.build.log)"
    fi
}

# mpi_env: MPI_X and MPI_U, the mode's variables as mpirun's -x options and env(1)'s -u
# options: they reach the ranks, not mpirun itself (it must not run under the shim).
mpi_env() {
    local e
    MPI_X=() MPI_U=()
    for e in "${ENVP[@]:1}"; do
        case $e in -u) ;; *=*) MPI_X+=(-x "$e") ;; *) MPI_U+=(-u "$e") ;; esac
    done
}

# mpi_no MODE FAMILY: true, with the family's samples n/a, when MODE cannot run MPI jobs:
# MPI_WHY, or several servers (mpirun gives every rank the same environment: with a variant's
# MPSSHIM_BENCH_SERVERS all ranks would go to the first, which measures nothing new).
mpi_no() {
    if [ -n "$MPI_WHY" ]; then
        na_family "$2" "$1"
        return 0
    fi
    if [ "${PROC_SERVERS:-1}" -gt 1 ]; then
        say "  $2 $1: n/a (mpirun sends every rank to one of its $PROC_SERVERS servers)"
        na_family "$2" "$1"
        return 0
    fi
    return 1
}

# mpi_job MODE NAME SECS N ARG...: one mpirun of N ranks of mpi_steps ARG... (mpi_env's
# variables), at most SECS s, its output in $WORK/MODE.NAME.1.out; RC its status ("check"
# when it printed no PASS, "budget" when SECS is 0: nothing ran).
mpi_job() {
    local mode=$1 name=$2 secs=$3 n=$4
    shift 4
    RC=budget
    [ "$secs" != 0 ] || return 0
    INFLIGHT=("$mode" "$name")
    timeout -k 5 "$secs" env "${MPI_U[@]}" "${MPIRUN[@]}" -np "$n" "${MPI_X[@]}" \
        "$MPI_BIN" "$@" >"$WORK/$mode.$name.1.out" 2>&1 </dev/null &
    BG_PIDS=($!)
    wait_all "${BG_PIDS[@]}"
    RC=$?
    [ "$RC" = 0 ] && ! grep -q '^PASS mpi_steps' "$WORK/$mode.$name.1.out" && RC=check
    RC=$(injected "$mode" "$name" "$RC")
    record "$mode" "$name" "$RC"
}

# fam_mpi MODE: for each N of MPI_RANKS, one mpirun of N ranks of mpi_steps, REPEATS rounds.
fam_mpi() {
    local mode=$1 n
    mpi_no "$mode" mpi && return
    mpi_env
    for n in $MPI_RANKS; do
        PROCS=1
        mpi_job "$mode" "mpi$n" "$(spend 120)" "$n" "${KERNEL_ARGS[@]}" --steps "$MPI_STEPS" \
            --repeats "$REPEATS"
        repeats_to_samples "$mode" "mpi$n" mpi_gpu_loop_s "$n" s "$RC" max gpu_loop_s
    done
}

# fam_mpicold MODE: the cold MPI job: for each repeat, shape of MPICOLD_SHAPES (and its 2-GPU
# form where MPICOLD_2GPU and the machine have it) and N of MPICOLD_RANKS, a fresh mpirun of N
# ranks of `mpi_steps --cold`, one sample each: cold means every sample's ranks are new
# processes, meeting the mode's daemon already up (the family's, as an MPI site's is). Repeats
# outermost, so that a run the budget cuts keeps samples at every point.
fam_mpicold() {
    local mode=$1 r shape us steps g fig n name v
    mpi_no "$mode" mpicold && return
    mpi_env
    for r in $(seq "$REPEATS"); do
        for shape in $MPICOLD_SHAPES; do
            us=${shape%%:*} steps=${shape#*:}
            for g in 1 2; do
                fig=mpi_cold${us}_s
                if [ "$g" = 2 ]; then
                    [[ " $MPICOLD_2GPU " == *" $us "* ]] || continue
                    fig=mpi_cold${us}_2gpu_s
                    if [ "$NGPUS" -lt 2 ]; then
                        for n in $MPICOLD_RANKS; do sample "$fig" "$n" "$mode" "$r" n/a s; done
                        continue
                    fi
                fi
                for n in $MPICOLD_RANKS; do
                    name=${fig%_s}.$n.$r
                    mpi_job "$mode" "$name" "$(spend 60)" "$n" "${KERNEL_ARGS[@]}" \
                        "${MPICOLD_ARGS[@]}" --us "$us" --steps "$steps" --gpus "$g"
                    v=$(awk '$1 == "metric" && $2 == "gpu_loop_s" && $5 == 1 { print $3 }' \
                        "$WORK/$mode.$name.1.out" 2>/dev/null)
                    [ "$RC" = 0 ] || v=
                    sample "$fig" "$n" "$mode" "$r" "${v:-FAIL}" s
                    [ "$RC" = 0 ] || failed "$mode" "$name" "$RC"
                done
            done
        done
    done
}

# fleet_missing: why the PyTorch fleet cannot run here (FLEET_WHY), or nothing.
fleet_missing() {
    [ "$CPU" = 1 ] && return # fake steps
    timeout 120 python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
        >/dev/null 2>&1 || FLEET_WHY="no PyTorch with CUDA for python3"
}

# fam_fleet MODE: for each P of FLEET_PROCS, P fleet.py processes at once, REPEATS windows.
fam_fleet() {
    local mode=$1 p secs rc v
    if [ -n "$FLEET_WHY" ]; then
        na_family fleet "$mode"
        return
    fi
    for p in $FLEET_PROCS; do
        secs=$(spend 150)
        PROCS=$p
        rm -rf "$WORK/fleet-barrier"
        mkdir -p "$WORK/fleet-barrier"
        measure "$mode" "fleet$p" "$secs" python3 "$ROOT/bench/fleet.py" "${FLEET_ARGS[@]}" \
            --procs "$p" --index %i --barrier "$WORK/fleet-barrier" --repeats "$REPEATS" \
            --seconds "$FLEET_SECONDS"
        rc=$RC
        repeats_to_samples "$mode" "fleet$p" fleet_steps_per_s "$p" steps/s "$rc" sum steps_per_s
        fleet_cpu "$mode" "$p" "$rc" fleet
        # Start-up as users meet it: the P processes started together, the slowest one's.
        v=$(cat "$WORK/$mode.fleet$p".*.out 2>/dev/null | awk -v n="$p" '
            $1 == "metric" && $2 == "start_s" { c++; if (c == 1 || $3 + 0 > m) m = $3 + 0 }
            END { if (c == n) print m }')
        [ "$rc" = 0 ] || v=
        sample fleet_start_s "$p" "$mode" 1 "${v:-FAIL}" s
    done
}

# fleet_cpu MODE P RC FAMILY: a fleet's CPU figures (FAMILY_cpu_us, FAMILY_client_cpu_us)
# of each repeat from its outputs (fleet.py, fleetc): the machine's busy CPUs (machine_cpus,
# the mean of the processes that read it: fleet.py's process 0, every fleetc) over the sum of
# the steps/s, and the processes' mean cpu_us_per_step. FAIL where a repeat lacks them (a run
# that failed: RC).
fleet_cpu() {
    local mode=$1 p=$2 rc=$3 fam=$4 r all client
    while read -r r all client; do
        [ "$rc" = 0 ] || all=FAIL client=FAIL
        sample "${fam}_cpu_us" "$p" "$mode" "$r" "$all" us
        sample "${fam}_client_cpu_us" "$p" "$mode" "$r" "$client" us
    done < <(cat "$WORK/$mode.$fam$p".*.out 2>/dev/null | awk -v n="$p" -v R="$REPEATS" '
        $1 == "metric" && $2 == "steps_per_s" { s[$5] += $3 }
        $1 == "metric" && $2 == "machine_cpus" { m[$5] += $3; hm[$5]++ }
        $1 == "metric" && $2 == "cpu_us_per_step" { c[$5] += $3; k[$5]++ }
        END { for (r = 1; r <= R; r++)
            printf "%d %s %s\n", r,
                (hm[r] && s[r] > 0 ? sprintf("%.1f", m[r] / hm[r] / s[r] * 1e6) : "FAIL"),
                (k[r] == n ? sprintf("%.1f", c[r] / n) : "FAIL") }')
}

# fam_free MODE: two freewait processes at once, REPEATS rounds: process 0 runs kernels,
# process 1 times its cuMemFree calls meanwhile (only it prints the figures).
fam_free() {
    local mode=$1 secs
    secs=$(spend 60)
    PROCS=2
    rm -f "$WORK/barrier"
    measure "$mode" free "$secs" "$B/bench/freewait" "${KERNEL_ARGS[@]}" "${FREE_ARGS[@]}" \
        --index %i --barrier "$WORK/barrier" --repeats "$REPEATS"
    PROCS=1
    repeats_to_samples "$mode" free free_max_ms - ms "$RC" max free_max_ms
    # (a failure said once, above)
    repeats_to_samples "$mode" free free_mean_ms - ms "$RC" max free_mean_ms >/dev/null
}

# fam_fleetc MODE: for each P of FLEETC_PROCS, P fleetc processes at once, REPEATS windows.
fam_fleetc() {
    local mode=$1 p secs
    for p in $FLEETC_PROCS; do
        secs=$(spend 90)
        PROCS=$p
        rm -f "$WORK/barrier"
        measure "$mode" "fleetc$p" "$secs" "$B/bench/fleetc" "${FLEETC_ARGS[@]}" \
            --seconds "$FLEET_SECONDS" --barrier "$WORK/barrier" --procs "$p" --repeats "$REPEATS"
        repeats_to_samples "$mode" "fleetc$p" fleetc_steps_per_s "$p" steps/s "$RC" sum steps_per_s
        fleet_cpu "$mode" "$p" "$RC" fleetc
    done
}

# na_family FAMILY MODE: the family's samples as n/a (the mode cannot run here).
na_family() {
    local x
    case $1 in
    idle) sample "idle${IDLE_PROCS}_MiB" - "$2" 1 n/a MiB ;;
    calls) for x in first_launch_sync_us $CALL_METRICS; do sample "$x" - "$2" 1 n/a us; done ;;
    copy) for x in $COPY_KINDS; do
        sample "copy_${x}_GBps" $((COPY_MAX << 20)) "$2" 1 n/a GB/s
    done ;;
    overlap) for x in $OVERLAP_PROCS; do sample overlap_s "$x" "$2" 1 n/a s; done ;;
    mpi) for x in $MPI_RANKS; do sample mpi_gpu_loop_s "$x" "$2" 1 n/a s; done ;;
    mpicold)
        local shape us
        for shape in $MPICOLD_SHAPES; do
            us=${shape%%:*}
            for x in $MPICOLD_RANKS; do
                sample "mpi_cold${us}_s" "$x" "$2" 1 n/a s
                [[ " $MPICOLD_2GPU " != *" $us "* ]] || sample "mpi_cold${us}_2gpu_s" "$x" "$2" 1 n/a s
            done
        done
        ;;
    fleet)
        for x in $FLEET_PROCS; do
            sample fleet_steps_per_s "$x" "$2" 1 n/a steps/s
            sample fleet_cpu_us "$x" "$2" 1 n/a us
            sample fleet_client_cpu_us "$x" "$2" 1 n/a us
            sample fleet_start_s "$x" "$2" 1 n/a s
        done
        ;;
    managed) for x in $MANAGED_METRICS; do sample "$x" - "$2" 1 n/a s; done ;;
    free) for x in $FREE_METRICS; do sample "$x" - "$2" 1 n/a ms; done ;;
    fleetc)
        for x in $FLEETC_PROCS; do
            sample fleetc_steps_per_s "$x" "$2" 1 n/a steps/s
            sample fleetc_cpu_us "$x" "$2" 1 n/a us
            sample fleetc_client_cpu_us "$x" "$2" 1 n/a us
        done
        ;;
    esac
}

# server_has_vars MODE LOG: checks that the server of a variant started with its variables
# (/proc/PID/environ), else the variant's column would measure plain mpsshim: says which in
# LOG, and fails the run when one is missing.
server_has_vars() {
    local pid v VARS
    mode_vars "$1"
    [ "${#VARS[@]}" -gt 0 ] || return 0
    pid=$(cat "$WORK/shim-pipe/server.pid" 2>/dev/null)
    for v in "${VARS[@]}"; do
        if grep -qzxF -- "$v" "/proc/$pid/environ" 2>/dev/null; then
            say "  server $pid started with $v" >>"$2"
        else
            FAILED=1
            say "  $1: the server (pid ${pid:-?}) did not start with $v" | tee -a "$2"
        fi
    done
}

# run_family FAMILY MODE: the family's figures under MODE, between the start and the stop of
# the mode's daemon (a fresh one for each family: a failure stays in its family).
run_family() {
    local fam=$1 mode=$2 log=$OUTDIR/bench-$2.log why t0=$SECONDS
    say "== $fam: $mode" | tee -a "$log" >/dev/null
    why=$(mps_missing "$mode") || why=
    [[ $fam == mpi* ]] && [ -n "$MPI_WHY" ] && why=$MPI_WHY
    [ "$fam" = fleet ] && [ -n "$FLEET_WHY" ] && why=$FLEET_WHY
    if [ -n "$why" ]; then
        say "  $fam $mode: skipped ($why)" >>"$log"
        na_family "$fam" "$mode"
        return
    fi
    BASE=$(gpu_mem)
    [ -z "${MODE_VARS[$mode]:-}" ] || say "  variant $mode: ${MODE_VARS[$mode]}" >>"$log"
    start_daemon "$mode" "$log" || {
        FAILED=1
        say "  $fam $mode: the daemon did not start"
        return
    }
    FAM_MODE=$mode
    # What the server says of itself (its spinning policy, say) as each family starts.
    [[ $mode != mpsshim* ]] || echo get_server_status | timeout 20 env \
        MPSSHIM_PIPE_DIRECTORY="$WORK/shim-pipe" "$SHIM_CTL" >>"$log" 2>&1
    server_has_vars "$mode" "$log"
    mode_env "$mode"
    "fam_$fam" "$mode"
    stop_daemon "$mode" "$log"
    FAM_MODE=
    # The next family's daemon logs afresh (stop_daemon copied these into the mode's log).
    rm -rf "$WORK/shim-log" "$WORK"/shim-log[0-9]* "$WORK/mps-log"
    settle_gpu "$BASE"
    say "  $fam $mode: $((SECONDS - t0)) s"
}

# throttle: the SM-share table (bench/throttle.sh) into OUTDIR, within what the budget has left.
throttle() {
    local secs rc
    secs=$(spend 120)
    if [ "$THROTTLE" = 0 ] || [ "$secs" -lt 30 ]; then
        say "SM shares: skipped ($([ "$THROTTLE" = 0 ] && echo --no-throttle ||
            echo "under 30 s of the budget left"))"
        return
    fi
    say "== SM shares and memory limits (bench/throttle.sh, at most $secs s)"
    OUT=$OUTDIR timeout -k 5 "$secs" bash "$ROOT/bench/throttle.sh" "$B" >"$WORK/throttle.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] || {
        FAILED=1
        say "  bench/throttle.sh failed (exit $rc): see throttle-summary.txt"
    }
}

# plots: bench/plot.py into OUTDIR. matplotlib, when missing, from the distribution's package
# where apt-get can (root: Debian's python3-matplotlib, which a stock Debian Python takes
# where it refuses pip's, PEP 668), else pip's; each at most 60 s.
plots() {
    if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
        say "matplotlib missing: installing it (python3-matplotlib, else pip; at most 60 s each)"
        { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null &&
            timeout 60 apt-get install -y -q python3-matplotlib >"$WORK/pip.out" 2>&1 &&
            python3 -c 'import matplotlib' >/dev/null 2>&1; } ||
            timeout 60 python3 -m pip install --quiet --retries 0 --timeout 10 matplotlib \
                >>"$WORK/pip.out" 2>&1 || {
            say "plots: not drawn here (no matplotlib: $(tail -n 1 "$WORK/pip.out"))."
            say "  Copy $OUTDIR to a machine with matplotlib and run: bench/plot.py DIR"
            return
        }
    fi
    python3 "$ROOT/bench/plot.py" "$OUTDIR" || say "plots: bench/plot.py failed"
}

# pack: the logs and plots into bench-logs.tgz (--pack), once, when there are any.
pack() {
    local files
    [ "$PACK" = 1 ] && [ "$PACKED" = 0 ] || return 0
    PACKED=1
    files=$(cd "$OUTDIR" && compgen -G 'bench-*.log'; compgen -G 'throttle-*.log'
        compgen -G throttle-summary.txt; compgen -G '*.png')
    [ -n "$files" ] || return 0
    # shellcheck disable=SC2086 # file names of ours, without blanks
    (cd "$OUTDIR" && tar czf bench-logs.tgz --remove-files -- $files) &&
        say "logs and plots packed into $OUTDIR/bench-logs.tgz"
}

# interrupted: at exit (lib.sh's cleanup), what a run cut short by a signal or an error still
# keeps before WORK goes: the outputs of the run under way and its daemon's logs in the mode's
# log, and the pack. Nothing to do after a whole run.
# shellcheck disable=SC2317 # called by cleanup
interrupted() {
    if [ "${#INFLIGHT[@]}" = 2 ]; then
        sleep 0.5 # the run's processes were just sent SIGTERM: their last lines
        say "  ${INFLIGHT[0]} ${INFLIGHT[1]}: interrupted; its output is in bench-${INFLIGHT[0]}.log"
        record "${INFLIGHT[@]}" interrupted
    fi
    if [ -n "$FAM_MODE" ]; then
        stop_daemon "$FAM_MODE" "$OUTDIR/bench-$FAM_MODE.log"
        FAM_MODE=
    fi
    pack
}

# ---------------------------------------------------------------- main

main() {
    local fam mode gpu t0
    bench_work
    # The commit measured: git's word for the checkout, unless MPSSHIM_BENCH_COMMIT names it
    # (a tree copied onto the GPU machine may carry an older .git than its files).
    COMMIT=${MPSSHIM_BENCH_COMMIT:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')}
    # What the binaries say they were built from (channel/version.c): the check on a tree
    # whose .git is older than its files, as the GPU machines' copies are.
    BUILT=$("$B/mpsshim-control" --version 2>/dev/null | sed -n 's/.*git \([^)]*\)).*/\1/p')
    printf 'figure\tx\tmode\trepeat\tvalue\tunit\n' >"$SAMPLES"
    say "mpsshim benchmarks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs," \
        "commit $COMMIT$(
            [ "$QUICK" = 1 ] && echo ', QUICK (smoke run)'), $REPEATS repeats, budget $BUDGET s"
    bench_platform
    [ "$CPU" = 1 ] || [ ! -S /tmp/nvidia-mps/control ] ||
        say "warning: an MPS control daemon may be running in /tmp/nvidia-mps"
    bench_needs bench/callbench bench/copysweep bench/fleetc bench/overlap bench/spin.ptx \
        bench/spin.fatbin tests/kernels.fatbin \
        tests/kernels.ptx tests/hold libmpsshim.so mpsshim-control mpsshim-server
    mpi_missing
    fleet_missing
    [ -z "$MPI_WHY" ] || say "MPI job: skipped: $MPI_WHY"
    [ "$NGPUS" -ge 2 ] || [[ " $FAMILIES " != *" mpicold "* ]] ||
        say "cold MPI job over 2 GPUs: n/a ($NGPUS GPU here)"
    [ -z "$FLEET_WHY" ] || say "inference fleet: skipped: $FLEET_WHY"
    [ "$CPU" = 1 ] && say "inference fleet: fake steps (fleet.py --fake), no PyTorch"
    for v in "${VARIANTS[@]}"; do say "variant mpsshim-${v%%:*}: mpsshim with ${v#*:}"; done
    figures
    if [ "$CPU" = 1 ]; then gpu="CPU test driver (MPSSHIM_BENCH_CPU=1), no GPU"; else
        gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
            awk '{ $1 = $1 "x"; print }' | paste -sd, -)
    fi
    {
        printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
        printf 'commit\t%s\n' "$COMMIT"
        printf 'built_from\t%s\n' "${BUILT:-?}"
        printf 'gpu\t%s\n' "${gpu:-?}"
        [ -z "${CUDA_VISIBLE_DEVICES+set}" ] || printf 'visible\t%s (CUDA_VISIBLE_DEVICES=%s)\n' "$NGPUS" "$CUDA_VISIBLE_DEVICES"
        printf 'driver\t%s\n' "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader \
            2>/dev/null | head -n 1)"
        printf 'cpus\t%s\n' "$(nproc)"
        printf 'run\t%s\n' "$([ "$QUICK" = 1 ] && echo 'QUICK (smoke run, not the figures)' ||
            echo full)"
        printf 'repeats\t%s\n' "$REPEATS"
        printf 'cpu_test_driver\t%s\n' "$CPU"
        printf 'native_mps\t%s\n' "${MPS_CTL:-not found}"
        # Variants: their names in order, then each one's variables.
        printf 'variants\t%s\n' "$(for v in "${VARIANTS[@]}"; do printf '%s ' "${v%%:*}"; done)"
        for v in "${VARIANTS[@]}"; do printf 'variant_%s\t%s\n' "${v%%:*}" "${v#*:}"; done
    } >"$OUTDIR/bench-info.txt"

    # The run's first GPU work pays what no mode should: the machine's wake from idle (the
    # GPU's clocks, the driver's state), and mpsshim goes first in every family (bench/README.md,
    # "Order of the modes"). So a native callbench --quick, not recorded, wakes the machine
    # first; every mode still starts its daemon and its clients cold, as users do.
    [ "$CPU" = 1 ] || "$B/bench/callbench" --quick >/dev/null 2>&1 ||
        say "machine warm-up (native callbench --quick) failed; going on"
    # Family by family, each under the three modes in turn: a run cut by its budget loses
    # its last families, not a whole mode.
    for fam in $FAMILIES; do
        t0=$SECONDS
        for mode in $MODES; do run_family "$fam" "$mode"; done
        say "== $fam: $((SECONDS - t0)) s in all"
    done
    throttle
    say "benchmarks took $SECONDS s"
    printf 'took_s\t%s\n' "$SECONDS" >>"$OUTDIR/bench-info.txt"
    if python3 "$ROOT/bench/report.py" "$OUTDIR" >/dev/null; then
        say
        cat "$OUTDIR/bench-results.md"
    else
        FAILED=1
        say "bench/report.py failed: the raw samples are in $SAMPLES"
    fi
    [ "$PLOTS" = 0 ] || plots
    pack
    say "results: $OUTDIR"
    [ "$FAILED" = 0 ] || { say "some runs FAILED: see the bench-*.log files"; exit 1; }
}

bench_summary "$OUTDIR/bench-summary.txt"
ON_EXIT=interrupted
main
