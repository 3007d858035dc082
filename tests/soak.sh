#!/usr/bin/env bash
# Soak (issue 11): CLIENTS clients at once, for SECONDS, of mixed programs (driver API,
# cudart, and PyTorch where it is installed and a GPU is there), each started again as
# soon as it ends, while one in every few is killed with SIGKILL at a random moment. Every
# client that was not killed (a bystander) must pass; at the end the server must have no
# clients, and its device memory, open descriptors and threads must be back where they were
# at the start (its resident memory is reported, not compared: the C library keeps freed
# memory). On a machine without a GPU the CPU test driver stands behind the server.
# Usage: bash tests/soak.sh BUILD_DIR [SECONDS [CLIENTS]]   (make soak SECONDS=600 CLIENTS=32)
set -u
B=$(cd "${1:-build}" && pwd)
SECS=${2:-60}
N=${3:-16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
gpu=0
real_driver_if_gpu && gpu=1
W=$(mktemp -d /tmp/mpsshim-soak.XXXXXX)
use_dir "$W"
"$CTL" -d || { echo "FAIL: the server did not start"; exit 1; }
S=$(server_pid)
fds() { ls "/proc/$S/fd" 2>/dev/null | wc -l; }
threads() { awk '/^Threads/ {print $2}' "/proc/$S/status"; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$S/status"; }
# The server as it started, before any client: after the soak, once idle, it starts afresh
# (server/handover/recycle.c) and must be back to this.
# (After a second: its fault thread's stream, 2 MiB on an H200, is made at its first pass.)
sleep 1
memS=$(mem_used) fdsS=$(fds) thrS=$(threads) rssS=$(rss)
# The server's log is kept in $OUT if set, however the soak ends (a timeout's SIGTERM too).
keep_log() { [ -n "${OUT:-}" ] && cp "$MPSSHIM_LOG_DIRECTORY/server.log" "$OUT/soak-server.log" 2>/dev/null; }
trap 'keep_log; printf "quit\n" | "$CTL" >/dev/null 2>&1' EXIT
trap 'exit 143' TERM
# ctl_bounded LINE: ctl, but a server that does not answer in 10 s does not stop the soak.
ctl_bounded() { printf '%s\n' "$1" | timeout 10 "$CTL"; }
# stall_report: what the server's threads are doing (kernel wait channel; user-space
# stacks in the server's log, from SIGUSR2, and from gdb too where it is installed).
stall_report() {
    echo "the server's clients:"
    ctl_bounded ps
    # The server's own watch (server/core/client.c): whose calls are stuck; the stacks below say
    # which of them holds the driver's lock (the thread in the driver not waiting on a lock).
    echo "calls in progress for 10 s or more, by the server's log (first 5):"
    grep "has been going on" "$MPSSHIM_LOG_DIRECTORY/server.log" | head -n 5
    for t in /proc/$S/task/*; do
        echo "thread ${t##*/} $(cat "$t/comm") waits in $(cat "$t/wchan" 2>/dev/null)"
    done
    # Every thread's user-space stack, written by the server itself into its log.
    kill -USR2 "$S" 2>/dev/null && sleep 2 &&
        echo "the server's stacks: [stack ...] lines in $MPSSHIM_LOG_DIRECTORY/server.log"
    if command -v gdb >/dev/null; then
        timeout 60 gdb -p "$S" -batch -ex "thread apply all bt 12" 2>/dev/null | grep "^#\|^Thread"
    fi
}

# What clients run: "program args" relative to the build directory.
# (Not streams_events: it asserts that a kernel is still running when queried, which a
# machine with more busy clients than cores need not keep.)
progs=("tests/vecadd 300000" "tests/memcpy_all --quick" "tests/graphs"
       "tests/graph_host" "tests/launch" "tests/smallkern 2000" "tests/multithread"
       "tests/vmm" "tests/mempool" "tests/ipc" "tests/hold 1 --all"
       "tests/cudart/vecadd" "tests/cudart/streams.shared" "tests/cudart/graphs")
if [ "$gpu" = 1 ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    progs+=("python3 $ROOT/tests/pytorch/smoke.py")
fi
# SOAK_PROGS="prog args;prog args;...": these instead (a program named twice is drawn twice
# as often), to press on one mix: "python3 smoke" stands for the PyTorch client.
if [ -n "${SOAK_PROGS:-}" ]; then
    IFS=';' read -r -a progs <<<"${SOAK_PROGS//python3 smoke/python3 $ROOT/tests/pytorch/smoke.py}"
fi

# First CLIENTS clients at once, every program among them: what the server starts once and
# keeps (its fault thread, the host-function thread, the driver's own threads and memory,
# such as the real context's default stream that an unaligned 2D copy uses, and what the
# driver keeps after CLIENTS clients' streams) is part of the baseline.
first=() firstp=()
for i in $(seq 0 $((N > ${#progs[@]} ? N - 1 : ${#progs[@]} - 1))); do
    p=${progs[$((i % ${#progs[@]}))]}
    firstp+=("$p")
    cmd=$p
    [ "${p#python3}" = "$p" ] && cmd="$B/$p"
    # shellcheck disable=SC2086
    env LD_PRELOAD="$SHIM" $cmd >/dev/null 2>&1 &
    first+=($!)
done
for i in "${!first[@]}"; do
    wait "${first[$i]}" || { echo "FAIL: a first client (${firstp[$i]}) failed"; exit 1; }
done
wait_for 10 no_clients
mem0=$(mem_used) fds0=$(fds) thr0=$(threads) rss0=$(rss)
# What the server can name of its device memory (its arena, its context's stack), at the
# start, after the first half and at the end: the rest of any growth is the driver's own.
arena_lines() { ctl_bounded get_server_status | grep "^Device [0-9]* arena"; }
arena0=$(arena_lines)

# slot i runs one client after another; pid[i], prog[i], killed[i] describe its current one.
declare -a pid prog killed
started=0 passed=0 failed=0 nkilled=0
start() {
    local i=$1 p=${progs[$((RANDOM % ${#progs[@]}))]}
    local cmd=$p
    [ "${p#python3}" = "$p" ] && cmd="$B/$p"
    # shellcheck disable=SC2086
    env LD_PRELOAD="$SHIM" $cmd >"$W/c$i.$started.log" 2>&1 &
    pid[$i]=$! prog[$i]=$p killed[$i]=0
    log[$i]="$W/c$i.$started.log"
    started=$((started + 1))
}
declare -a log
finish() { # slot i's client has ended: count it
    local i=$1
    wait "${pid[$i]}"
    local rc=$?
    if [ "${killed[$i]}" = 1 ]; then
        nkilled=$((nkilled + 1))
    elif [ $rc = 0 ]; then
        passed=$((passed + 1))
        rm -f "${log[$i]}"
    else
        failed=$((failed + 1))
        echo "FAIL: bystander ${prog[$i]} exited $rc (log ${log[$i]}):"
        tail -n 3 "${log[$i]}"
    fi
}
# phase SECS: N slots of clients for SECS (each client started again as soon as it ends,
# random kills), then every client is let end and the server must have none left.
crowded=0 stalled=0 soak_t0=$SECONDS
phase() {
    [ $stalled = 0 ] || return
    for i in $(seq 0 $((N - 1))); do start "$i"; done
    end=$((SECONDS + $1))
    next_look=$((SECONDS + 10))
    last_done=0 last_change=$SECONDS
    while [ $SECONDS -lt $end ]; do
        # No client passed for 60 s, with new ones started all the time: the server is stuck
        # (kills and refusals still end clients). Say where, and stop.
        if [ ! -d "/proc/$S" ] || [ "$(cat /proc/$S/stat 2>/dev/null | awk '{print $3}')" = Z ]; then
            echo "FAIL: the server died; the end of its log:"
            tail -n 40 "$MPSSHIM_LOG_DIRECTORY/server.log"
            stalled=1
            break
        fi
        done_now=$passed
        if [ $done_now != $last_done ]; then
            last_done=$done_now last_change=$SECONDS
        elif [ $((SECONDS - last_change)) -ge 60 ]; then
            echo "FAIL: no client ended in 60 s: the server is stuck"
            stall_report
            stalled=1
            break
        fi
        # Every 10 s: how many clients the server has; once, who, if they outnumber the slots
        # by more than the clients a kill may leave being released.
        if [ $SECONDS -ge $next_look ]; then
            next_look=$((SECONDS + 10))
            nc=$(ctl_bounded get_server_status | awk '/^Clients/ {print $2}')
            echo "at $((SECONDS - soak_t0)) s: ${nc:-?} clients of the server"
            if [ "${nc:-0}" -gt $((N + 8)) ] && [ $crowded = 0 ]; then
                crowded=1
                echo "more clients than slots; the server's list:"
                ctl_bounded ps
            fi
        fi
        sleep 0.2
        for i in $(seq 0 $((N - 1))); do
            if ! kill -0 "${pid[$i]}" 2>/dev/null; then
                finish "$i"
                start "$i"
            fi
        done
        # About one kill a second, at a random client.
        if [ $((RANDOM % 5)) = 0 ]; then
            v=$((RANDOM % N))
            kill -9 "${pid[$v]}" 2>/dev/null && killed[$v]=1
        fi
    done
    # The last clients get 60 s to end; a stuck server's are killed (and counted as failed).
    for _ in $(seq 600); do
        alive=0
        for i in $(seq 0 $((N - 1))); do kill -0 "${pid[$i]}" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    if [ $alive = 1 ]; then
        echo "FAIL: clients still running 60 s after the end"
        [ $stalled = 1 ] || stall_report
        stalled=1
        for i in $(seq 0 $((N - 1))); do kill -9 "${pid[$i]}" 2>/dev/null; done
    fi
    for i in $(seq 0 $((N - 1))); do finish "$i"; done

    wait_for 60 no_clients || echo "FAIL: clients still listed 60 s after the last one ended"
    sleep 1
}
# Two halves, each drained at its end: device memory after the first half against after the
# second tells a leak (each half's clients leave some behind: it grows again) from what the
# driver keeps of the largest load it has seen (stream and channel resources, local memory:
# it grows once, in the first half). On a GPU the second half must not add more than 32 MiB
# (a leak of 8 KiB per client would, over the some 4000 clients of a 10-minute soak's half);
# on the CPU test driver, which keeps nothing, device memory must be back where it started.
phase $((SECS / 2))
mem_mid=$(mem_used) arena_mid=$(arena_lines)
phase $((SECS - SECS / 2))
mem1=$(mem_used) fds1=$(fds) thr1=$(threads) rss1=$(rss)
rc=0
[ "$failed" = 0 ] && [ $stalled = 0 ] || rc=1
no_clients || rc=1
# Nothing a client took outlives it: the server holds no record of any client's objects and
# no IPC share (what the driver keeps for itself is not among them).
objs=$(ctl_bounded get_server_status | awk '/^Objects/ {print $2, $3}' | tr -d '(')
[ "$objs" = "0 0" ] || { echo "FAIL: the server still holds client objects: ${objs:-?} (records, IPC shares)"; rc=1; }
if [ $gpu = 1 ]; then
    [ $((mem1 - mem_mid)) -le $((32 << 20)) ] ||
        { echo "FAIL: device memory grew in the second half: $mem_mid -> $mem1 bytes"; rc=1; }
else
    [ "$mem1" = "$mem0" ] || { echo "FAIL: device memory $mem0 -> $mem1 bytes"; rc=1; }
fi
[ "$fds1" = "$fds0" ] || { echo "FAIL: server descriptors $fds0 -> $fds1"; rc=1; }
[ "$thr1" = "$thr0" ] || { echo "FAIL: server threads $thr0 -> $thr1"; rc=1; }
# Idle now: the server starts afresh in the same process (unless MPSSHIM_RECYCLE_IDLE=0) and
# is back where it started, device memory, descriptors and threads; resident memory too,
# within what a start's own allocations vary by (reported).
idle=${MPSSHIM_RECYCLE_IDLE:-10}
afresh() { grep -c "Started afresh" "$MPSSHIM_LOG_DIRECTORY/server.log"; }
if [ "$idle" != 0 ] && [ $stalled = 0 ]; then
    n0=$(afresh)
    grown() { [ "$(afresh)" -gt "$n0" ]; }
    if wait_for $((idle + 60)) grown && wait_for 10 no_clients; then
        memA=$(mem_used) fdsA=$(fds) thrA=$(threads) rssA=$(rss)
        # On a GPU, the whole device's memory as the driver says, within 4 MiB.
        [ "$memA" = "$memS" ] || { [ $gpu = 1 ] && [ "$memA" -le $((memS + (4 << 20))) ]; } ||
            { echo "FAIL: device memory at the start $memS, after the fresh start $memA bytes"; rc=1; }
        [ "$fdsA" = "$fdsS" ] || { echo "FAIL: descriptors at the start $fdsS, after the fresh start $fdsA"; rc=1; }
        [ "$thrA" = "$thrS" ] || { echo "FAIL: threads at the start $thrS, after the fresh start $thrA"; rc=1; }
        afresh_line=$(grep "Started afresh" "$MPSSHIM_LOG_DIRECTORY/server.log" | tail -n 1 | sed 's/^.*\] //')
        printf 'server idle, started afresh (%s): device memory %s -> %s bytes, descriptors %s -> %s, threads %s -> %s, resident %s -> %s KiB (before the first client -> after)\n' \
            "$afresh_line" "$memS" "$memA" "$fdsS" "$fdsA" "$thrS" "$thrA" "$rssS" "$rssA"
    else
        echo "FAIL: the idle server did not start afresh within $((idle + 60)) s: $(tail -n 3 "$MPSSHIM_LOG_DIRECTORY/server.log")"
        rc=1
    fi
fi
printf 'soak, %s s, %s clients at once (%s): %d clients, %d killed, %d bystanders passed, %d failed\n' \
    "$SECS" "$N" "$([ $gpu = 1 ] && echo GPU || echo CPU test driver)" "$started" "$nkilled" \
    "$passed" "$failed"
printf 'server: client objects held at the end: %s (records, IPC shares)\n' "${objs:-?}"
printf 'server: device memory %s -> %s (after the first half) -> %s bytes, descriptors %s -> %s, threads %s -> %s, resident %s -> %s KiB\n' \
    "$mem0" "$mem_mid" "$mem1" "$fds0" "$fds1" "$thr0" "$thr1" "$rss0" "$rss1"
printf '%s\n' "$arena0" | sed 's/^/server at the start: /'
printf '%s\n' "$arena_mid" | sed 's/^/server after the first half: /'
arena_lines | sed 's/^/server at the end: /'
# Where the server's resident memory is, by mapping (largest first).
echo "server's largest resident mappings (KiB, mapping):"
awk '/^[0-9a-f]+-[0-9a-f]+ / {name = $6 ? $6 : "[anonymous]"; range = $1}
     /^Rss:/ {if ($2 > 1024) print $2, range, name}' "/proc/$S/smaps" | sort -rn | head -n 8
# The server goes before its directory: a quit after it cannot find the control socket
# (every CI run used to leave its soak server running).
keep_log
ctl quit >/dev/null 2>&1
trap - EXIT
[ $rc = 0 ] && rm -rf "$W" || echo "files in $W"
exit $rc
