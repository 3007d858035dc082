#!/usr/bin/env bash
# GPU timelines (server/control/trace.c, docs/operations.md, "GPU timeline"), the whole path on the CPU test driver,
# whose stand-in for CUPTI (tests/cpudrv/cupti.c) times each kernel, copy and set its streams
# run:
#  - the summary and the file on records whose overlaps are known (tests/unit/trace_test);
#  - the server's declarations of CUPTI's records against the toolkit's cupti_activity.h,
#    where it is installed (tests/trace_abi.c);
#  - a server whose CUPTI cannot be loaded says why at `trace start` and serves on;
#  - a server loads CUPTI at its first `trace start`, not before; errors are answered as
#    such; three bench/overlap clients started together and a vecadd, traced, give a file
#    that a JSON parser reads, each client's kernels, copies and sets under its own pid, and
#    a summary that the records bear out (recomputed here from the file); the server does
#    not start afresh while a trace runs, and does once it stopped;
#  - `trace start SECONDS FILE` answers when it has written FILE.
# No timing is asserted: how much the clients' work overlapped is the CPUs' business.
#   tests/trace.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/trace"
rm -rf "${W:?}"/*
CUDA=${CUDA:-/usr/local/cuda}

# check_json FILE EXPECTATION...: the file read as JSON and its summary recomputed from its
# records (tools/trace_check.py); prints what does not hold.
check_json() { python3 "$ROOT/tools/trace_check.py" "$@"; }

# ---------------------------------------------------------------- the summary and the file
if "$B/tests/unit/trace_test" "$W/unit.json" >"$W/unit.out" 2>&1; then
    check_json "$W/unit.json" unit || rc=1
else
    fail "tests/unit/trace_test: $(tail -n 3 "$W/unit.out")"
fi

# ---------------------------------------------------------------- CUPTI's record layout
hdr=""
for d in "$CUDA/extras/CUPTI/include" "$CUDA/include"; do
    [ -e "$d/cupti_activity.h" ] && { hdr=$d; break; }
done
if [ -n "$hdr" ]; then
    "${CC:-cc}" -std=gnu11 -Wall -Wextra -Werror -fsyntax-only -I"$CUDA/include" -I"$hdr" \
        -I"$ROOT" "$ROOT/tests/trace_abi.c" >"$W/abi.out" 2>&1 ||
        fail "server/control/trace_cupti.h does not match $hdr/cupti_activity.h: $(grep -m1 error "$W/abi.out")"
else
    echo "SKIP: no cupti_activity.h under $CUDA: the record layout is not checked"
fi

# ---------------------------------------------------------------- no CUPTI
use_dir "$W/nocupti"
MPSSHIM_CUPTI=$W/nowhere/libcupti.so "$CTL" -d || exit 1
if out=$(ctl "trace start" 2>&1); then
    fail "trace start succeeded without CUPTI: $out"
fi
grep -q "CUPTI could not be loaded from MPSSHIM_CUPTI=$W/nowhere/libcupti.so" <<<"$out" ||
    fail "trace start without CUPTI did not say why: $out"
ctl "trace status" | grep -q "^CUPTI not loaded" || fail "trace status: $(ctl 'trace status')"
shim "$B/tests/vecadd" 1000 >"$W/nocupti.out" 2>&1 ||
    fail "the server did not serve on after a failed trace: $(tail -n 1 "$W/nocupti.out")"
stop_server 20 || fail "the server without CUPTI did not quit"

# ---------------------------------------------------------------- the whole path
use_dir "$W/cpu"
LOG=$MPSSHIM_LOG_DIRECTORY
# A fresh start 3 s after the last client (1 s let it come, under load, before the
# status query right after the trace stop, whose answer it forgets).
MPSSHIM_CUPTI=$B/cpudrv/libcupti.so MPSSHIM_RECYCLE_IDLE=3 "$CTL" -d || exit 1
shim "$B/tests/vecadd" 1000 >"$W/before.out" 2>&1 || fail "vecadd before the trace failed"
ctl "trace status" | grep -q "^CUPTI not loaded" || fail "CUPTI was loaded before any trace"
grep -q "Trace: loaded CUPTI" "$LOG/server.log" && fail "CUPTI was loaded before any trace"
# Answers of commands that fail are marked failed (mpsshim-control exits 1).
expect_fail() {
    local what=$1 want=$2 out
    if out=$(ctl "$what" 2>&1) || ! grep -q "$want" <<<"$out"; then
        fail "\"$what\" answered: $out"
    fi
}
expect_fail "trace stop" "No trace is running"
expect_fail "trace" "Usage: trace start"
expect_fail "trace frob" "Usage: trace start"
expect_fail "trace start -1" "Invalid trace length"
expect_fail "trace start 1 $W/no/such/dir/t.json" "its directory is not writable"
expect_fail "trace start 1 $W" "a directory"
out=$(ctl "trace start 0 run.json") || fail "trace start: $out"
grep -q "^Tracing to $LOG/run.json until" <<<"$out" || fail "trace start answered: $out"
grep -q "Trace: loaded CUPTI from $B/cpudrv/libcupti.so" "$LOG/server.log" ||
    fail "the server did not say it loaded CUPTI"
expect_fail "trace start" "A trace is already running"

rm -f "$W/barrier"
pids=()
for i in 1 2 3; do
    env LD_PRELOAD="$SHIM" "$B/bench/overlap" --kernel delay_set --launches 10 --us 2000 \
        --barrier "$W/barrier" --procs 3 >"$W/overlap$i.out" 2>&1 &
    pids+=($!)
done
env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 100000 >"$W/vecadd.out" 2>&1 &
V=$!
for p in "${pids[@]}" "$V"; do wait "$p" || fail "client $p failed: see $W"; done
# The server would start afresh after a second without clients (and without control
# connections: the log is watched, not the server): not while a trace runs.
afresh() { grep -q "starts afresh in the same process" "$LOG/server.log"; }
sleep 3
afresh && fail "the server started afresh during a trace"
ctl "trace status" | grep -q "^Tracing for .* to $LOG/run.json" || fail "trace status: $(ctl 'trace status')"
out=$(ctl "trace stop") || fail "trace stop failed: $out"
echo "$out" >"$W/stop.out"
grep -q "^Trace written to $LOG/run.json" <<<"$out" || fail "trace stop answered: $out"
want=("$V:vec_add:1" "$V:HtoD:2" "$V:memset:1" "$V:DtoH:1")
for p in "${pids[@]}"; do
    grep -q "^Client $p (overlap): GPU busy .* ms, beside other clients .* ms" <<<"$out" ||
        fail "the summary has no line for client $p: $out"
    want+=("$p:delay_set:11") # its warm-up launch and its 10
done
grep -q "^Client $V (vecadd): GPU busy" <<<"$out" || fail "the summary has no line for vecadd: $out"
grep -q "^All: GPU busy" <<<"$out" || fail "the summary has no line for all: $out"
{ [ -s "$LOG/run.json" ] && check_json "$LOG/run.json" "${want[@]}"; } ||
    fail "the trace file: see above"
ls "$LOG"/*.tmp >/dev/null 2>&1 && fail "a temporary file was left: $(ls "$LOG"/*.tmp)"
ctl "trace status" | grep -q "^Last trace: Trace written to $LOG/run.json" ||
    fail "trace status after the stop: $(ctl 'trace status')"
wait_for 30 afresh || fail "the server did not start afresh once the trace stopped"
ctl "trace status" | grep -q "^CUPTI not loaded" || fail "CUPTI stayed after the fresh start"

# A timed trace answers once its file is written; the default file goes in the log dir.
out=$(ctl "trace start 1 timed.json") || fail "trace start 1: $out"
grep -q "^Trace written to $LOG/timed.json" <<<"$out" || fail "trace start 1 answered: $out"
{ [ -s "$LOG/timed.json" ] && check_json "$LOG/timed.json" empty; } ||
    fail "the timed trace's file"
out=$(ctl "trace start") || fail "trace start: $out"
f=$(sed -n "s|^Tracing to \($LOG/trace-[0-9-]*\.json\) until.*|\1|p" <<<"$out")
[ -n "$f" ] || fail "the default file is not in the log directory: $out"
ctl "trace stop" >/dev/null || fail "trace stop of the default file"
[ -n "$f" ] && { [ -s "$f" ] || fail "$f was not written"; }
stop_server 20 || fail "the server did not quit"

# ---------------------------------------------------------------- CUPTI detached between traces
# MPSSHIM_TRACE_DETACH=1: CUPTI leaves after each trace (cuptiFinalize) and comes back for the
# next, which still sees its clients' work.
use_dir "$W/detach"
LOG=$MPSSHIM_LOG_DIRECTORY
MPSSHIM_CUPTI=$B/cpudrv/libcupti.so MPSSHIM_TRACE_DETACH=1 "$CTL" -d || exit 1
for t in 1 2; do
    ctl "trace start 0 d$t.json" >/dev/null || fail "trace start $t (detached between)"
    env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 1000 >"$W/detach$t.out" 2>&1 &
    V=$!
    wait "$V" || fail "vecadd under trace $t failed"
    ctl "trace stop" >"$W/detach$t.stop" || fail "trace stop $t: $(cat "$W/detach$t.stop")"
    check_json "$LOG/d$t.json" "$V:vec_add:1" "$V:HtoD:2" || fail "trace $t with CUPTI detached between"
done
grep -q "CUPTI stays attached" "$LOG/server.log" && fail "CUPTI did not detach: $(grep -m1 'stays attached' "$LOG/server.log")"
stop_server 20 || fail "the server did not quit"

# ---------------------------------------------------------------- CUPTI's ids not had
# A CUPTI that gives no stream id and other context ids than its records' (the stand-in's
# MPSSHIM_CPUDRV_CUPTI_IDS=1): streams are named by the driver's stream id alone.
use_dir "$W/ids"
LOG=$MPSSHIM_LOG_DIRECTORY
MPSSHIM_CUPTI=$B/cpudrv/libcupti.so MPSSHIM_CPUDRV_CUPTI_IDS=1 "$CTL" -d || exit 1
ctl "trace start 0 ids.json" >/dev/null || fail "trace start (odd ids)"
env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 1000 >"$W/ids.out" 2>&1 &
V=$!
wait "$V" || fail "vecadd under the trace with odd ids failed"
ctl "trace stop" >"$W/ids.stop" || fail "trace stop (odd ids): $(cat "$W/ids.stop")"
check_json "$LOG/ids.json" "$V:vec_add:1" "$V:HtoD:2" "$V:DtoH:1" ||
    fail "a stream named by the driver's id alone was not the client's"
stop_server 20 || fail "the server did not quit"
exit "$rc"
