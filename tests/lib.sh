# shellcheck shell=bash
# Shared by tests/ci.sh, tests/limits.sh and tests/control.sh (sourced once B, the build
# directory, is set): servers of the test's own on the CPU test driver, and the commands
# that talk to them. Each script keeps its own way of reporting checks.

SHIM=$B/libmpsshim.so
CTL=$B/mpsshim-control
export MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1
export MPSSHIM_TEST_KERNELS=$B/tests
# Two CPU test devices: multi-device clients (tests/progs/multigpu) run here too.
export MPSSHIM_CPUDRV_DEVICES=2
# One server for both: the scripts here test a server of several devices and its clients.
# A server per GPU, the default where a pipe directory's server holds several GPUs
# (MPSSHIM_SERVER_PER_GPU's auto), has scripts of its own that set both settings
# (server_per_gpu.sh, moved_programs.sh, fault_servers.sh).
export MPSSHIM_SERVER_PER_GPU=0

# real_driver_if_gpu: where a GPU is there, the real driver stands behind the servers
# started from here on (the CPU test driver's settings above are dropped); 0 if so.
real_driver_if_gpu() {
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || return 1
    unset MPSSHIM_DRIVER MPSSHIM_CPUDRV_DEVICES
}

# needs_two_devices NAME: GPU=1 where a GPU is there (real_driver_if_gpu), else empty; a
# machine of one GPU ends the calling script with "SKIP NAME: ..." (the CPU test driver has two).
needs_two_devices() {
    GPU=""
    real_driver_if_gpu && GPU=1
    if [ -n "$GPU" ] && [ "$(nvidia-smi -L | grep -c '^GPU')" -lt 2 ]; then
        echo "SKIP $1: needs two GPUs (or the CPU test driver)"
        exit 0
    fi
}

# server_objects: the client records and IPC shares the server still holds ("0 0": none).
server_objects() { ctl get_server_status | awk '/^Objects/ {print $2, $3}' | tr -d '('; }

# use_dir DIR: DIR/pipe and DIR/log are the pipe and log directories from here on.
use_dir() { export MPSSHIM_PIPE_DIRECTORY=$1/pipe MPSSHIM_LOG_DIRECTORY=$1/log; }

# own_dir DIR: a test script's own server lives in DIR (made; use_dir); W is DIR. rc, the
# script's status, is 0 until a fail: a script of several own_dir sections keeps the failure
# of an earlier one (own_dir once set rc to 0 again, and a later section's pass hid it).
# fail MSG...: prints "FAIL: MSG" and sets rc to 1 (a script that stops at its first failure
# defines its own after sourcing this file).
rc=${rc:-0}
own_dir() {
    W=$1
    mkdir -p "$W"
    use_dir "$W"
}
fail() {
    echo "FAIL: $*"
    rc=1
}
# own_server DIR: own_dir DIR and a server of its own started there (S: its pid); the test
# ends if none starts (-d returns once it serves, its pid file written).
own_server() {
    own_dir "$1"
    "$CTL" -d || exit 1
    S=$(server_pid)
    [ -n "$S" ] || {
        echo "FAIL: no server"
        exit 1
    }
}

# ctl LINE...: sends each LINE to the control daemon; prints its answers.
ctl() { printf '%s\n' "$@" | "$CTL"; }

# shim CMD...: runs CMD through the shim. (A background client that must be $! itself is
# started with env directly: a function would make $! a subshell's.)
shim() { env LD_PRELOAD="$SHIM" "$@"; }

# wait_for SECS CMD...: polls CMD every 0.1 s until it succeeds; 1 if it did not in SECS s.
wait_for() {
    local n=$(($1 * 10))
    shift
    for _ in $(seq "$n"); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}

# server_pid: the pid of the server of MPSSHIM_PIPE_DIRECTORY; empty when there is none.
server_pid() { cat "$MPSSHIM_PIPE_DIRECTORY/server.pid" 2>/dev/null; }

# gone PID: PID no longer runs.
gone() { ! kill -0 "$1" 2>/dev/null; }

# stop_server SECS: asks the server to quit; 1 if it still runs SECS s later.
stop_server() {
    local pid
    pid=$(server_pid)
    ctl quit >/dev/null 2>&1
    [ -z "$pid" ] || wait_for "$1" gone "$pid"
}

# mem_used: device 0's memory the driver reports in use, bytes; back to this level once
# every client is cleaned up.
mem_used() { ctl get_server_status | awk '/^Device 0 memory used/ {print $5}'; }

# no_clients: the server has no clients left (they are cleaned up asynchronously).
no_clients() { [ "$(ctl get_server_status | awk '/^Clients/ {print $2}')" = 0 ]; }

# direct_run OUT PROG ARGS...: PROG's run straight on the CPU test driver, its output in OUT;
# PROG's status. Where MPSSHIM_DIRECT_CACHE names a directory (tests/ci.sh sets one), a run
# that passed is kept there and its output copied instead of running it again: a program on
# the CPU test driver alone prints the same whatever server settings a script tests, and the
# CI tier ran the same programs directly up to seven times over. Kept per command line and
# per value of what the driver and the programs read from the environment
# (MPSSHIM_CPUDRV_*, MPSSHIM_TEST_*, CUDA_*, and the few variables of tests/progs' own), so a
# script that sets MPSSHIM_CPUDRV_FREE_WAITS=1 gets runs of its own.
direct_run() {
    local out=$1 key kept st
    shift
    if [ -z "${MPSSHIM_DIRECT_CACHE:-}" ]; then
        timeout 300 env LD_LIBRARY_PATH="$B/cpudrv" "$@" >"$out" 2>&1
        return
    fi
    key=$( {
        printf '%s\n' "$*"
        env | grep -E '^(MPSSHIM_CPUDRV_|MPSSHIM_TEST_|CUDA_|THREAD_PEER_|FAULT_GO=|WHOLE_WAIT_|CPUDRV_)' | sort
    } | md5sum)
    kept=$MPSSHIM_DIRECT_CACHE/${key%% *}
    if [ -f "$kept" ]; then
        cp "$kept" "$out"
        return 0
    fi
    timeout 300 env LD_LIBRARY_PATH="$B/cpudrv" "$@" >"$out" 2>&1
    st=$?
    # Written whole, then named: the other lane of tests/ci.sh may look for it meanwhile.
    if [ $st = 0 ] && mkdir -p "$MPSSHIM_DIRECT_CACHE" && cp "$out" "$kept.$BASHPID"; then
        mv "$kept.$BASHPID" "$kept"
    fi
    return $st
}

# programs_through_server WHAT DIR: every run of tests/progs/programs.txt through the server
# of MPSSHIM_PIPE_DIRECTORY (WHAT names it in failures), the `both` ones against their direct
# run on the CPU test driver (direct_run), exactly as the CI tier runs them on its default
# server; outputs in DIR. PROGRAMS_RUN: how many ran. Non-zero when any failed.
# PROGRAMS_MATCH, when set: only the runs whose program name matches that extended regular
# expression; PROGRAMS_EXCLUDE, when set: not the runs whose command line matches that one.
programs_through_server() {
    local what=$1 dir=$2 cmd mode name prog bad=0
    local -a argv
    PROGRAMS_RUN=0
    while IFS='|' read -r cmd mode; do
        [[ $cmd =~ ^[[:space:]]*(#|$) ]] && continue
        read -r -a argv <<<"$cmd"
        mode=$(echo "$mode" | xargs)
        name=$(echo "$cmd" | xargs | tr ' ' '_')
        prog=$B/tests/${argv[0]}
        [ -z "${PROGRAMS_MATCH:-}" ] || [[ ${argv[0]} =~ ^($PROGRAMS_MATCH)$ ]] || continue
        [ -z "${PROGRAMS_EXCLUDE:-}" ] || ! [[ $cmd =~ $PROGRAMS_EXCLUDE ]] || continue
        PROGRAMS_RUN=$((PROGRAMS_RUN + 1))
        if ! timeout 150 env LD_PRELOAD="$SHIM" "$prog" "${argv[@]:1}" >"$dir/$name.shim" 2>&1; then
            echo "FAIL: $name through $what: $(tail -n 1 "$dir/$name.shim")"
            bad=1
            continue
        fi
        [ "$mode" = both ] || continue
        direct_run "$dir/$name.direct" "$prog" "${argv[@]:1}"
        if ! diff -q "$dir/$name.direct" "$dir/$name.shim" >/dev/null; then
            echo "FAIL: $name: the output differs from its direct run"
            diff "$dir/$name.direct" "$dir/$name.shim" | head -n 6
            bad=1
        fi
    done <"$(dirname "${BASH_SOURCE[0]}")/progs/programs.txt"
    return $bad
}
