#!/usr/bin/env bash
# The test programs through a process's GPUs' own servers (issue 30), as the default has
# it where a pipe directory's server holds several GPUs: each program of
# tests/progs/programs.txt and tests/cudart/programs.txt (CUDA runtime programs) that MOVED
# names (below, with why; every one on a GPU, the GPU tier's, and with MPSSHIM_CI_FULL=1,
# make test-full) runs through
# one server (the pipe directory's, MPSSHIM_SERVER_PER_GPU_MOVE=0) and moved (to its first
# GPU's server at its first context, each further GPU's for contexts there: both settings 1,
# so that the programs that ask about peer access before their first context, which by
# default stay with the pipe directory's server, move too), and the
# two outputs must be identical (the shim's own "mpsshim:" lines aside). A
# program that uses what a process of several servers cannot do yet (KNOWN below) must fail
# moved with the refusal the documentation names, said on stderr, and pass through one
# server. Prints one line per program and a summary; exits 1 on any other difference.
# usage: moved_programs.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
needs_two_devices moved_programs
W=$2/moved_programs
rm -rf "$W"
mkdir -p "$W/out" "$W/pipe"
chmod 700 "$W/pipe"
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log
unset CUDA_VISIBLE_DEVICES MPSSHIM_SERVER_PER_GPU MPSSHIM_SERVER_PER_GPU_MOVE

# What a moved process refuses today, by program: the line its stderr must carry. Each is
# written in docs/operations.md ("A moved process that uses several GPUs").
declare -A KNOWN=(
    # a pool's access for a device whose server, a server of the process's, is not the pool's
    # (pool memory does not mirror); by default this program stays (it asks about peer
    # access first: tests/server_per_gpu.sh, step 11)
    [pool_peer]="CUDA_ERROR_INVALID_DEVICE"
    # managed memory once a process uses two servers
    [managed_devices]="managed memory in a process served by several GPUs' own servers"
)

# The pipe directory's server, with the defaults: its contexts are made at first use
# (MPSSHIM_SERVER_CONTEXTS's auto: server/core/devctx.c) and it tells its clients to move,
# so the one-server form below (clients told MPSSHIM_SERVER_PER_GPU_MOVE=0, which stay)
# runs every program through a server of that kind too.
"$CTL" -d || { echo "FAIL: the pipe directory's server did not start"; exit 1; }
grep -q "its shared context made at first use" "$W/log/server.log" &&
    grep -q "Clients move to their GPUs' own servers" "$W/log/server.log" ||
    { echo "FAIL: the pipe directory's server of two GPUs did not make its contexts at first use and have its clients move, by default"; exit 1; }

pass=0 known=0 failed=0 skipped=0
# again MODE DIR PROG ARGS...: a run that failed (MODE one: through one server; moved), once
# more with nothing beside it, for the log only: whether it fails alone too, or only beside
# its twin (thread_peer's one-server run failed 3 times in 9 beside its twin on two H200s).
again() {
    local mode=$1 dir=$2 prog=$3 rc
    shift 3
    if [ "$mode" = one ]; then
        MPSSHIM_SERVER_PER_GPU_MOVE=0 timeout 150 env LD_PRELOAD="$SHIM" "$dir/$prog" "$@" \
            >"$W/out/again.out" 2>&1
    else
        MPSSHIM_SERVER_PER_GPU=1 MPSSHIM_SERVER_PER_GPU_MOVE=1 timeout 150 env LD_PRELOAD="$SHIM" \
            "$dir/$prog" "$@" >"$W/out/again.out" 2>&1
    fi
    rc=$?
    if [ $rc = 0 ]; then echo "alone again: passed"; else echo "alone again: exit $rc"; fi
}
# one_program DIR PREFIX CMD: CMD (a program built in DIR and its arguments) through one
# server and moved, at once (their servers differ: the CI tier's time), and its verdict.
one_program() {
    local argv prog name one orc mrc
    read -r -a argv <<<"$3"
    prog=${argv[0]}
    name=$2$(echo "$3" | tr ' ' '_' | tr -cd 'A-Za-z0-9_.-')
    MPSSHIM_SERVER_PER_GPU_MOVE=0 timeout 150 env LD_PRELOAD="$SHIM" "$1/$prog" "${argv[@]:1}" \
        >"$W/out/$name.one" 2>&1 &
    one=$!
    MPSSHIM_SERVER_PER_GPU=1 MPSSHIM_SERVER_PER_GPU_MOVE=1 timeout 150 env LD_PRELOAD="$SHIM" "$1/$prog" "${argv[@]:1}" \
        >"$W/out/$name.two" 2>&1
    mrc=$?
    wait "$one"
    orc=$?
    if [ $orc = 77 ] || [ $mrc = 77 ]; then
        echo "$name: SKIP"
        skipped=$((skipped + 1))
    elif [ -n "${KNOWN[$prog]:-}" ]; then
        if [ $orc = 0 ] && [ $mrc != 0 ] && grep -q "${KNOWN[$prog]}" "$W/out/$name.two"; then
            echo "$name: KNOWN (refused moved as documented: ${KNOWN[$prog]})"
            known=$((known + 1))
        else
            echo "$name: FAIL (a known refusal that did not happen as documented: one server exit $orc, moved exit $mrc)"
            failed=$((failed + 1))
        fi
    elif [ $orc != 0 ]; then
        echo "$name: FAIL (through one server: exit $orc: $(grep -m1 'FAIL' "$W/out/$name.one"); $(again one "$1" "${argv[@]}"))"
        failed=$((failed + 1))
    elif [ $mrc != 0 ]; then
        echo "$name: FAIL (moved: exit $mrc: $(grep -m1 'FAIL\|mpsshim:' "$W/out/$name.two"); $(again moved "$1" "${argv[@]}"))"
        failed=$((failed + 1))
    elif ! diff <(grep -v '^mpsshim: ' "$W/out/$name.one") <(grep -v '^mpsshim: ' "$W/out/$name.two") \
        >"$W/out/$name.diff"; then
        echo "$name: FAIL (moved, not one server's output: $(head -n 3 "$W/out/$name.diff" | tr '\n' ' '))"
        failed=$((failed + 1))
    else
        echo "$name: PASS"
        pass=$((pass + 1))
    fi
}
# The runs that take the paths a move changes, by command line (a program, or a program
# and its first arguments): a process's first context, where it moves, and what it does
# before (vecadd; cudart's start through cuGetProcAddress and the export tables, static and
# shared; a library loaded and its kernels asked about before any context: modules);
# several contexts and devices, each at its own server, and the device numbers a server of
# one GPU translates (contexts, multigpu, thread_peer, twogpus, peer, peer_events,
# idle_answers --deferred, ncclish between two processes, the cudart programs of several
# devices); what names a device in its properties (vmm, mempool, cudart's mallocasync) or
# crosses processes (ipc, vmm_ipc); host memory registered with a GPU's server (hostreg),
# managed memory of one device (managed); and both of KNOWN's refusals. A program of one
# device that uses none of that runs there as on any server, which the CI tier's main loop
# tests: on a GPU, and with MPSSHIM_CI_FULL=1, they all run moved too.
MOVED='vecadd|vecadd.shared|modules|contexts|multigpu|thread_peer|twogpus'
MOVED="$MOVED|twogpus.shared|peer|peer.shared|peer_events|pool_peer|managed_devices"
MOVED="$MOVED|idle_answers --deferred|ncclish|ncclsmem|ncclsmem.shared|vmm|vmm_ipc|mempool"
MOVED="$MOVED|mallocasync|mallocasync.shared|ipc|hostreg|managed"
if [ -n "$GPU" ] || [ "${MPSSHIM_CI_FULL:-0}" = 1 ]; then MOVED='.*'; fi
# The runs of a list (their commands before the '|'). Faults end the server (their own
# tests run them); the others named drive servers of their own.
for list in progs cudart; do
    dir=$B/tests prefix=""
    [ "$list" = cudart ] && dir=$B/tests/cudart prefix=cudart-
    while IFS='|' read -r cmd _; do
        [[ $cmd =~ ^[[:space:]]*# ]] && continue
        cmd=$(echo "$cmd" | xargs)
        case ${cmd%% *} in "" | fault | copy_victim | hold | memlimit | ipc_across) continue ;; esac
        [[ $cmd =~ ^($MOVED)( |$) ]] || continue
        one_program "$dir" "$prefix" "$cmd"
    done <"$ROOT/tests/$list/programs.txt"
done
printf 'quit\n' | "$CTL" >/dev/null 2>&1
moved=$(cat "$W"/log/gpu-*/server.log 2>/dev/null | grep -c "moved from the pipe directory's server")
echo "moved programs: $pass with one server's output, $known refused as documented, $failed failed," \
    "$skipped skipped; $moved moves to the GPUs' servers"
[ "$failed" = 0 ] && [ "$moved" -gt 0 ]
