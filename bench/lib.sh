# shellcheck shell=bash
# Shared by bench/run.sh and bench/throttle.sh (sourced once B and ROOT are set; then
# bench_init): output and time budget, the three modes' daemons and environments,
# background runs, the preamble of a run and its summary file. Each script keeps its own
# measurements, result cells and table.

declare -a ROWS=() BG_PIDS=()
# Variants of mpsshim (bench/run.sh --variant): mode mpsshim-NAME -> "VAR=VAL,VAR=VAL", the
# variables its server and clients get on top of mpsshim's.
declare -A MODE_VARS=()
SHIM_UP=0
MPS_UP=0
MPS_CTL=
WORK=
TEE_PID=
DAEMON_LOG=

say() { printf '%s\n' "$*"; }

# bench_init NAME: CPU, SHIM, SHIM_CTL and OUTDIR (OUT, else a new /tmp/mpsshim-NAME.*);
# exits 2 if OUTDIR is unusable.
bench_init() {
    BENCH_NAME=$1
    CPU=${MPSSHIM_BENCH_CPU:-0}
    SHIM=$B/libmpsshim.so
    SHIM_CTL=$B/mpsshim-control
    OUTDIR=${OUT:-}
    [ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d "/tmp/mpsshim-$BENCH_NAME.XXXXXX")
    mkdir -p "$OUTDIR" || exit 2
    OUTDIR=$(cd "$OUTDIR" && pwd)
}

# limit SECS: SECS, or less when the run's budget (BUDGET) has less left.
limit() {
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# add_row ROW: appends ROW to the table's rows unless it is there already.
add_row() {
    local r
    for r in "${ROWS[@]}"; do [ "$r" = "$1" ] && return; done
    ROWS+=("$1")
}

# mode_vars MODE: VARS, the variables of a variant of mpsshim (none for other modes), and
# SERVERS, how many servers its clients are spread over (the variant's
# MPSSHIM_BENCH_SERVERS, the bench's own and not among VARS; else 1).
mode_vars() {
    local all v
    VARS=()
    SERVERS=1
    [ -z "${MODE_VARS[$1]:-}" ] || IFS=, read -ra all <<<"${MODE_VARS[$1]}"
    for v in "${all[@]}"; do
        case $v in
        MPSSHIM_BENCH_SERVERS=*) SERVERS=${v#*=} ;;
        *) VARS+=("$v") ;;
        esac
    done
}

# shim_dir KIND J: the pipe (KIND pipe) or log (KIND log) directory of mpsshim server J
# (0: the only one, unless a variant spreads its clients over several).
shim_dir() { if [ "$2" = 0 ]; then echo "$WORK/shim-$1"; else echo "$WORK/shim-$1$2"; fi; }

# proc_env I: PROCENV, what process I (1..) of a mode adds to ENVP: with several servers
# (MPSSHIM_BENCH_SERVERS), the directories of server (I - 1) mod SERVERS.
proc_env() {
    PROCENV=()
    [ "${PROC_SERVERS:-1}" -gt 1 ] || return 0
    local j=$((($1 - 1) % PROC_SERVERS))
    PROCENV=("MPSSHIM_PIPE_DIRECTORY=$(shim_dir pipe $j)" "MPSSHIM_LOG_DIRECTORY=$(shim_dir log $j)")
}

# mode_env MODE: ENVP, the env(1) prefix every program of MODE runs under (proc_env adds
# what differs from one process to the next), and PROC_SERVERS.
mode_env() {
    local VARS SERVERS=1
    ENVP=(env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY)
    case $1 in
    native)
        [ "$CPU" = 1 ] && ENVP+=("LD_LIBRARY_PATH=$B/cpudrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        ;;
    mps)
        ENVP=(env "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps-pipe" "CUDA_MPS_LOG_DIRECTORY=$WORK/mps-log")
        ;;
    mpsshim | mpsshim-*)
        ENVP+=("MPSSHIM_PIPE_DIRECTORY=$WORK/shim-pipe" "MPSSHIM_LOG_DIRECTORY=$WORK/shim-log"
            "LD_PRELOAD=$SHIM${LD_PRELOAD:+:$LD_PRELOAD}")
        [ "$CPU" = 1 ] && ENVP+=("MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1")
        mode_vars "$1"
        ENVP+=("${VARS[@]}")
        ;;
    esac
    PROC_SERVERS=$SERVERS
}

# ---------------------------------------------------------------- daemons

# start_mps: the native MPS control daemon in $WORK's directories; non-zero if it failed.
start_mps() {
    mkdir -p "$WORK/mps-pipe" "$WORK/mps-log"
    MPS_UP=1 # before the start: a daemon that started but did not answer is stopped too
    # The control daemon starts nvidia-cuda-mps-server, found beside it.
    env CUDA_MPS_PIPE_DIRECTORY="$WORK/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$WORK/mps-log" \
        PATH="$(dirname "$MPS_CTL"):$PATH" timeout 40 "$MPS_CTL" -d
}

# stop_mps: asks the native MPS daemon, if started, to quit.
stop_mps() {
    [ "$MPS_UP" = 1 ] || return 0
    echo quit | timeout 20 env CUDA_MPS_PIPE_DIRECTORY="$WORK/mps-pipe" "$MPS_CTL" >/dev/null 2>&1
    MPS_UP=0
}

# start_shim [MODE]: the mpsshim daemon in $WORK's directories, with the variables of MODE
# when it is a variant (mpsshim-NAME), or MPSSHIM_BENCH_SERVERS of them, each in
# directories of its own (shim_dir); non-zero if one failed.
start_shim() {
    local drv=() VARS SERVERS j
    SHIM_UP=1 # before the start, as for MPS
    [ "$CPU" = 1 ] && drv=("MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1")
    mode_vars "${1:-mpsshim}"
    SHIM_SERVERS=$SERVERS
    for j in $(seq 0 $((SERVERS - 1))); do
        mkdir -p "$(shim_dir pipe "$j")" "$(shim_dir log "$j")"
        # No CUDA_MPS_* here: the server must not become a client of a native MPS. The
        # control daemon passes its environment on to the server it starts.
        env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY -u LD_PRELOAD \
            MPSSHIM_PIPE_DIRECTORY="$(shim_dir pipe "$j")" MPSSHIM_LOG_DIRECTORY="$(shim_dir log "$j")" \
            "${drv[@]}" "${VARS[@]}" timeout 40 "$SHIM_CTL" -d || return 1
    done
}

# stop_shim: asks every server of the mode to quit; waits (10 s each) for it to exit, then
# ends it by its pid; non-zero if one had to be.
stop_shim() {
    [ "$SHIM_UP" = 1 ] || return 0
    local pid j rc=0 dir
    SHIM_UP=0
    for j in $(seq 0 $((${SHIM_SERVERS:-1} - 1))); do
        dir=$(shim_dir pipe "$j")
        pid=$(cat "$dir/server.pid" 2>/dev/null)
        echo quit | timeout 20 env MPSSHIM_PIPE_DIRECTORY="$dir" "$SHIM_CTL" >/dev/null 2>&1
        [ -n "$pid" ] || continue
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || continue 2
            sleep 0.1
        done
        say "mpsshim server $pid did not quit in 10 s: sending SIGTERM"
        kill "$pid" 2>/dev/null
        rc=1
    done
    return $rc
}

# mps_missing MODE: prints why native MPS cannot run here when MODE is mps and it cannot.
mps_missing() {
    [ "$1" = mps ] || return 1
    if [ "$CPU" = 1 ]; then
        echo CPU test driver
    elif [ -z "$MPS_CTL" ]; then
        echo no MPS
    else
        return 1
    fi
}

# start_daemon MODE LOG: MODE's daemon (native has none), its output appended to LOG, and
# DAEMON_LOG its log directory; when it fails, says so, stops it and returns 1.
start_daemon() {
    DAEMON_LOG=
    case $1 in
    mps)
        start_mps >>"$2" 2>&1 || {
            say "  nvidia-cuda-mps-control -d failed"
            stop_mps
            return 1
        }
        DAEMON_LOG=$WORK/mps-log
        ;;
    mpsshim | mpsshim-*)
        start_shim "$1" >>"$2" 2>&1 || {
            say "  mpsshim-control -d failed: see $(basename "$2")"
            cat "$WORK/shim-log/server.log" >>"$2" 2>/dev/null
            stop_shim
            return 1
        }
        DAEMON_LOG=$WORK/shim-log
        ;;
    esac
    return 0
}

# stop_daemon MODE LOG: stops what start_daemon started and appends its daemon's logs to LOG.
stop_daemon() {
    local f
    stop_mps
    stop_shim
    [ -n "$DAEMON_LOG" ] || return 0
    # (Several mpsshim servers: the others' logs are in shim-log1, shim-log2...)
    for f in "$DAEMON_LOG"/* "$DAEMON_LOG"[0-9]*/*; do
        [ -f "$f" ] || continue
        say "=== $1 daemon: ${f#"$WORK"/}"
        cat "$f"
    done >>"$2"
}

# ---------------------------------------------------------------- runs

# wait_all PID...: waits for background runs; when one fails, ends the others (they would
# wait for it at the barrier). Returns 0 when every one exited 0, else the first failure's
# status. Polls bash's own table of running jobs rather than `wait -n`: in CI a `wait -n`
# given jobs already reaped once named none, and once (bench-scripts, 180 s) a run stayed in it
# to the end; `wait PID` of a job bash reaped still gives its status. (The table, not kill -0:
# a pid reaped and reused would look alive.)
wait_all() {
    local rc=0 st pid rest=("$@") keep ended=0 running
    while [ "${#rest[@]}" -gt 0 ]; do
        keep=()
        running=" $(jobs -rp | tr '\n' ' ') "
        for pid in "${rest[@]}"; do
            if [[ $running == *" $pid "* ]]; then
                keep+=("$pid")
                continue
            fi
            wait "$pid"
            st=$?
            [ "$st" = 0 ] || [ "$rc" != 0 ] || rc=$st
        done
        rest=("${keep[@]}")
        if [ "$rc" != 0 ] && [ "$ended" = 0 ] && [ "${#rest[@]}" -gt 0 ]; then
            kill "${rest[@]}" 2>/dev/null
            ended=1
        fi
        [ "${#rest[@]}" = 0 ] || sleep 0.05
    done
    BG_PIDS=()
    return "$rc"
}

# ---------------------------------------------------------------- preamble

# bench_work: WORK, a new temp dir; no pipe or log directory (nor, on the CPU test driver,
# driver) from the caller: nothing may reach a daemon started elsewhere.
bench_work() {
    WORK=$(mktemp -d "/tmp/mpsshim-$BENCH_NAME-work.XXXXXX") || exit 2
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY MPSSHIM_PIPE_DIRECTORY \
        MPSSHIM_LOG_DIRECTORY
    [ "$CPU" = 1 ] && unset MPSSHIM_DRIVER
}

# bench_platform: says what runs the modes (the CPU test driver, or the GPUs and MPS_CTL,
# which it sets when native MPS is found); exits 1 without the CPU test driver it needs.
bench_platform() {
    if [ "$CPU" = 1 ]; then
        say "!!! MPSSHIM_BENCH_CPU=1: native and mpsshim on the CPU TEST DRIVER, no MPS. These"
        say "!!! numbers only test this script: they have NO meaning for GPUs. !!!"
        [ -e "$B/cpudrv/libcuda.so.1" ] || {
            say "no CPU test driver at $B/cpudrv/libcuda.so.1"
            exit 1
        }
    else
        nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_mode \
            --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
        MPS_CTL=$(command -v nvidia-cuda-mps-control 2>/dev/null)
        [ -n "$MPS_CTL" ] || [ ! -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] ||
            MPS_CTL=/usr/local/nvidia/bin/nvidia-cuda-mps-control
        say "native MPS: ${MPS_CTL:-not found (its column is n/a)}"
    fi
}

# bench_needs FILE...: says the CUDA and mpsshim environment, then exits 1 unless every FILE
# (relative to B) was built; says where raw outputs go.
bench_needs() {
    local e missing=
    for e in $(compgen -e | grep -E '^(MPSSHIM_|CUDA_)' | grep -v '^MPSSHIM_BENCH_CPU$'); do
        say "environment: $e=${!e}"
    done
    for e in "$@"; do
        [ -e "$B/$e" ] || missing="$missing $B/$e"
    done
    [ -z "$missing" ] || {
        say "missing (run make):$missing"
        exit 1
    }
    say "raw outputs: $OUTDIR"
}

# cleanup: stops what the script started (after ON_EXIT, the script's own last words, when it
# names a function); then lets tee write the last of the summary.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    [ -z "${ON_EXIT:-}" ] || "$ON_EXIT"
    stop_shim >/dev/null 2>&1
    stop_mps
    [ -n "$WORK" ] && rm -rf "$WORK"
    exec 1>&3 2>&4
    [ -n "$TEE_PID" ] && wait "$TEE_PID" 2>/dev/null
}

# bench_summary FILE: everything printed from here on also goes to FILE; cleanup at exit.
bench_summary() {
    exec 3>&1 4>&2
    exec > >(tee "$1") 2>&1
    TEE_PID=$!
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}
