#!/usr/bin/env bash
# The GPU timeline on a GPU (server/control/trace.c; issue 29, item 4): the real driver and CUPTI
# behind a server of its own.
#  1. `trace start`; four bench/overlap clients started together (spin_ns kernels, --barrier);
#     `trace stop` -> overlap.json.
#  2. `trace start` again (CUPTI loaded already); where mpirun and bench/mpi_steps are, an MPI
#     job of 8 ranks through the shim (mpirun -x LD_PRELOAD), else a vecadd; `trace stop`
#     -> mpi.json.
# Each file must be JSON with every client's kernels under its pid and a summary that its
# records bear out (tools/trace_check.py). The summaries are printed, with whether kernels of
# different clients ran at once (said, not asserted). The files, their HTML views
# (tools/trace_html.py: open in a browser, or `chromium --headless --screenshot`) and the
# server's log go to $OUT when it is set. CUPTI: MPSSHIM_CUPTI, else the toolkit's, else
# pip's nvidia-cuda-cupti, else the server's own search. Exit 77 when there is no GPU.
#   tests/gpu_trace.sh [BUILD]
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skipped: no GPU"
    exit 77
fi
CUDA=${CUDA:-/usr/local/cuda}
WORK=$(mktemp -d /tmp/mpsshim-gpu-trace.XXXXXX)
export MPSSHIM_PIPE_DIRECTORY=$WORK/pipe MPSSHIM_LOG_DIRECTORY=$WORK/log
export MPSSHIM_TEST_KERNELS=$B/tests MPSSHIM_BENCH_KERNELS=$B/bench
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY MPSSHIM_DRIVER
SHIM=$B/libmpsshim.so
CTL=$B/mpsshim-control
LOG=$MPSSHIM_LOG_DIRECTORY
rc=0
fail() {
    echo "FAIL: $*"
    rc=1
}
ctl() { printf '%s\n' "$@" | "$CTL"; }

if [ -z "${MPSSHIM_CUPTI:-}" ]; then
    for f in "$CUDA/extras/CUPTI/lib64/libcupti.so" "$CUDA/lib64/libcupti.so" \
        "$CUDA/lib/libcupti.so"; do
        [ -e "$f" ] && { export MPSSHIM_CUPTI=$f; break; }
    done
fi
if [ -z "${MPSSHIM_CUPTI:-}" ]; then
    f=$(python3 -c 'import glob, os, nvidia.cuda_cupti as m
print((sorted(glob.glob(os.path.join(os.path.dirname(m.__file__), "lib", "libcupti.so*"))) or [""])[0])' \
        2>/dev/null)
    [ -n "$f" ] && export MPSSHIM_CUPTI=$f
fi
echo "CUPTI: ${MPSSHIM_CUPTI:-(not set: the server looks for it)}; work in $WORK"
"$CTL" -d || exit 1

# summary FILE: the summary in FILE's metadata, and whether clients' kernels ran at once.
summary() {
    python3 - "$1" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["metadata"]["mpsshim"]
for o in m["owners"]:
    if o["client"] or o["records"]:
        print("  %-8d %-12s busy %10.3f ms, beside other clients %10.3f ms (%3d%%), %d records"
              % (o["pid"], o["exe"] if o["client"] else "(server)", o["busy_us"] / 1000,
                 o["beside_us"] / 1000, 100 * o["beside_us"] / o["busy_us"] if o["busy_us"] else 0,
                 o["records"]))
a = m["all"]
print("  any GPU work %.3f ms, two or more clients at once %.3f ms, busy times add up to %.3f ms"
      % (a["union_us"] / 1000, a["multi_us"] / 1000, a["sum_us"] / 1000))
print("  kernels of different clients ran at once: %s"
      % ("yes (%.3f ms)" % (a["multi_us"] / 1000) if a["multi_us"] > 0 else "NO"))
EOF
}

# ---------------------------------------------------------------- four overlap clients
N=200
out=$(ctl "trace start 0 overlap.json") || fail "trace start: $out"
echo "$out"
rm -f "$WORK/barrier"
want=()
for i in 1 2 3 4; do
    env LD_PRELOAD="$SHIM" "$B/bench/overlap" --launches "$N" --us 100 --blocks 2 \
        --barrier "$WORK/barrier" --procs 4 >"$WORK/overlap$i.out" 2>&1 &
    want+=("$!:spin_ns:$((N + 1))") # its warm-up launch and its N
done
for w in "${want[@]}"; do
    wait "${w%%:*}" || fail "overlap ${w%%:*} failed: $(tail -n 2 "$WORK"/overlap*.out)"
done
out=$(ctl "trace stop") || fail "trace stop: $out"
echo "$out"
python3 "$ROOT/tools/trace_check.py" "$LOG/overlap.json" "${want[@]}" || fail "overlap.json"
summary "$LOG/overlap.json"

# ---------------------------------------------------------------- an MPI job
out=$(ctl "trace start 0 mpi.json") || fail "trace start (again): $out"
echo "$out"
if command -v mpirun >/dev/null && [ -x "$B/bench/mpi_steps" ]; then
    # mpirun itself must not run under the shim: the ranks get it through -x.
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 -x LD_PRELOAD="$SHIM" \
        -x MPSSHIM_PIPE_DIRECTORY -x MPSSHIM_LOG_DIRECTORY -x MPSSHIM_BENCH_KERNELS \
        -x MPSSHIM_TEST_KERNELS "$B/bench/mpi_steps" --steps 400 >"$WORK/mpi.out" 2>&1 \
        </dev/null
    grep -q '^PASS mpi_steps' "$WORK/mpi.out" || fail "the MPI job: $(tail -n 3 "$WORK/mpi.out")"
    want=(exe:mpi_steps:spin_ns:400)
else
    echo "no mpirun or $B/bench/mpi_steps: a vecadd instead of the MPI job"
    env LD_PRELOAD="$SHIM" "$B/tests/vecadd" >"$WORK/vecadd.out" 2>&1 &
    V=$!
    wait "$V" || fail "vecadd: $(tail -n 2 "$WORK/vecadd.out")"
    want=("$V:vec_add:1")
fi
out=$(ctl "trace stop") || fail "trace stop (again): $out"
echo "$out"
python3 "$ROOT/tools/trace_check.py" "$LOG/mpi.json" "${want[@]}" || fail "mpi.json"
summary "$LOG/mpi.json"

ctl quit >/dev/null 2>&1
if [ -n "${OUT:-}" ]; then
    for f in overlap mpi; do
        [ -e "$LOG/$f.json" ] || continue
        cp "$LOG/$f.json" "$OUT/trace-$f.json"
        python3 "$ROOT/tools/trace_html.py" "$LOG/$f.json" "$OUT/trace-$f.html" ||
            fail "tools/trace_html.py on $f.json"
    done
    cp "$LOG/server.log" "$OUT/trace-server.log" 2>/dev/null
fi
[ "$rc" = 0 ] && echo "PASS gpu_trace" || echo "FAIL gpu_trace (work in $WORK)"
exit "$rc"
