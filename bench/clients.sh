#!/usr/bin/env bash
# Many clients at once (issue 30): what N clients cost the server and whether every one is
# served. For each count, on a server of its own with the default client limit (unless
# MPSSHIM_MAX_CLIENTS is set), N idle clients (tests/progs/hold) then N working ones
# (tests/progs/smallkern), all started at once. One table row per count and kind: seconds
# until every client was served (connect_s: working ones connected and set up), seconds the
# working ones then took, all let go at once (run_s), clients that passed, and the server's
# resident
# memory, threads, descriptors and shared memory (its clients' segments) at the peak,
# less the idle server's; GPU memory in use where nvidia-smi is.
#
# usage: bench/clients.sh [BUILD_DIR] [COUNT...]      (counts: 128 256 by default)
#   OUT=DIR                   outputs (clients-*.log, the servers' logs) go there
#   MPSSHIM_BENCH_CPU=1       on the CPU test driver even where a GPU is
#   MPSSHIM_CLIENTS_ITERS=K   smallkern iterations of a working client (2000; 1000 on the CPU
#                             test driver, whose kernels run on this machine's CPUs)
# Exits non-zero if any client failed or the server kept anything after they left.
set -u
B=$(cd "${1:-build}" && pwd) || exit 2
[ $# -gt 0 ] && shift
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(128 256)
OUTDIR=${OUT:-$(mktemp -d /tmp/mpsshim-clients.XXXXXX)}
mkdir -p "$OUTDIR" || exit 2
WORK=$(mktemp -d /tmp/mpsshim-clients-work.XXXXXX)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../tests/lib.sh"
GPU=0
if [ "${MPSSHIM_BENCH_CPU:-0}" != 1 ] && real_driver_if_gpu; then GPU=1; fi
ITERS=${MPSSHIM_CLIENTS_ITERS:-$([ "$GPU" = 1 ] && echo 2000 || echo 1000)}
export MPSSHIM_AUTOSTART=0
FAILED=0
declare -a PIDS=()

# shellcheck disable=SC2317 # the EXIT trap's
finish() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    ctl quit >/dev/null 2>&1
    rm -rf "$WORK"
}
trap finish EXIT

# sample PID: the server's resident KiB, threads, descriptors and shared KiB.
sample() {
    local rss thr shm fds
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$1/status")
    shm=$(awk '/^RssShmem/ {print $2}' "/proc/$1/status")
    thr=$(awk '/^Threads/ {print $2}' "/proc/$1/status")
    fds=$(find "/proc/$1/fd" -mindepth 1 2>/dev/null | wc -l)
    echo "${rss:-0} $thr $fds ${shm:-0}"
}
gpu_mib() {
    [ "$GPU" = 1 ] || { echo -; return; }
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0
}
# served DIR WORD: how many of DIR's outputs have a line starting with WORD.
calc() { awk "BEGIN { print $1 }"; }
served() { grep -l "^$2" "$1"/*.out 2>/dev/null | wc -l; }
# watch DIR WORD N: samples the server into PEAK (and GPU1) until N of DIR's outputs say WORD
# or any says FAIL, for at most 600 s.
watch() {
    local a b c d pa pb pc pd
    for _ in $(seq 6000); do
        read -r a b c d < <(sample "$S")
        read -r pa pb pc pd <<<"$PEAK"
        PEAK="$((a > pa ? a : pa)) $((b > pb ? b : pb)) $((c > pc ? c : pc)) $((d > pd ? d : pd))"
        [ "$GPU" = 1 ] && GPU1=$(gpu_mib)
        [ "$(served "$1" FAIL)" -gt 0 ] && return 1
        [ "$(served "$1" "$2")" -ge "$3" ] && return 0
        sleep 0.1
    done
    return 1
}

printf '%-8s %-8s %-9s %-6s %-8s %-8s %-8s %-6s %-9s %s\n' clients kind connect_s run_s \
    passed rss_MiB threads fds shmem_MiB gpu_MiB | tee "$OUTDIR/clients.txt"
for n in "${COUNTS[@]}"; do
    for kind in idle working; do
        dir=$WORK/$kind-$n
        use_dir "$dir"
        mkdir -p "$dir/out"
        mkfifo "$dir/go"
        "$CTL" -d || { echo "FAIL: no server for $n $kind clients"; exit 1; }
        S=$(server_pid)
        read -r rss0 thr0 fds0 shm0 < <(sample "$S")
        gpu0=$(gpu_mib)
        PIDS=()
        t0=$(date +%s.%N)
        for i in $(seq "$n"); do
            if [ "$kind" = idle ]; then
                env LD_PRELOAD="$SHIM" "$B/tests/hold" 600 >"$dir/out/$i.out" 2>&1 &
            else
                env LD_PRELOAD="$SHIM" MPSSHIM_TEST_GO="$dir/go" "$B/tests/smallkern" "$ITERS" \
                    >"$dir/out/$i.out" 2>&1 &
            fi
            PIDS+=($!)
        done
        # Idle: until every one is ready. Working: until every one is set up (connected),
        # then all let go at once (MPSSHIM_TEST_GO) and sampled until they are done.
        PEAK="0 0 0 0"
        GPU1=-
        if [ "$kind" = idle ]; then
            watch "$dir/out" ready "$n"
            t1=$(date +%s.%N)
            t2=$t1
        else
            watch "$dir/out" "ok setup" "$n"
            t1=$(date +%s.%N)
            exec 3<>"$dir/go" # kept open: one that opens it late goes too
            watch "$dir/out" PASS "$n"
            t2=$(date +%s.%N)
            for p in "${PIDS[@]}"; do wait "$p"; done
            exec 3>&-
        fi
        passed=$(served "$dir/out" "$([ "$kind" = idle ] && echo ready || echo PASS)")
        read -r a b c d <<<"$PEAK"
        # awk, not bc: the GPU machines have no bc (its absence printed 0.0 in every column).
        printf '%-8s %-8s %-9.1f %-6.1f %-8s %-8.1f %-8s %-6s %-9.1f %s\n' "$n" "$kind" \
            "$(calc "$t1 - $t0")" "$(calc "$t2 - $t1")" "$passed/$n" \
            "$(calc "($a - $rss0) / 1024")" "$((b - thr0))" "$((c - fds0))" \
            "$(calc "($d - $shm0) / 1024")" \
            "$([ "$GPU" = 1 ] && echo "$((GPU1 - gpu0))" || echo -)" | tee -a "$OUTDIR/clients.txt"
        [ "$passed" = "$n" ] || {
            FAILED=1
            grep -h -m1 -E 'FAIL|error|refused' "$dir"/out/*.out | sort | uniq -c | head -n 5
        }
        for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
        for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
        PIDS=()
        wait_for 120 no_clients || { echo "FAIL: clients still held 120 s after they left"; FAILED=1; }
        objs=$(server_objects)
        [ "$objs" = "0 0" ] || { echo "FAIL: the server still holds $objs objects"; FAILED=1; }
        stop_server 30 || FAILED=1
        grep -q "tables not empty" "$dir/log/server.log" && { echo "FAIL: tables not empty"; FAILED=1; }
        cp "$dir/log/server.log" "$OUTDIR/server-$kind-$n.log" 2>/dev/null
    done
done
exit $FAILED
