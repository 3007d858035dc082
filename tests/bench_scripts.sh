#!/usr/bin/env bash
# The benchmark scripts' plumbing, not their numbers (bench/run.sh on the CPU test driver):
# 1. --quick with a variant of mpsshim: every family's rows (fleetc's too), a column and a
#    log of the variant, its server started with its variable, its would-be verdicts; where
#    matplotlib is, bench/plot.py draws from those results. The fleets' CPU per step, the
#    machine's and their processes' own, has numbers.
# 2. one run failed on purpose (MPSSHIM_BENCH_FAIL) among the calls runs: the script exits
#    non-zero, the cell keeps the other run's median with "1 FAIL", the goal says how many
#    failed and is not met, and the failed run's whole output is in the packed log.
# 3. a variant spreading its clients over two servers (MPSSHIM_BENCH_SERVERS=2): both
#    servers serve fleetc's processes, both logs are in the variant's log, and the variable
#    reaches neither server; fleetc's host work spread between its launches (--fleetc-spread),
#    which its figure says.
# 4. the cold MPI job (family mpicold, issue 29) on two CPU-driver devices, bench/fakempi
#    standing in for MPI where none is installed, one of its jobs failed on purpose: every
#    figure's row (the 2-GPU one's too, its ranks over both devices), each sample a job of
#    its own with mpi_steps --cold, one server for the whole family, the failed job counted
#    in its cell and in issue 29's goal.
#   tests/bench_scripts.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$2/bench
mkdir -p "$W"
fail() {
    echo "FAIL: $*"
    exit 1
}
# Each run bounded well inside the CI row's time, so that a run that stays (as one did in CI,
# once) fails here with the end of its log, whose last lines name the run it was in.
bench() {
    timeout -k 5 120 env MPSSHIM_BENCH_CPU=1 bash "$ROOT/bench/run.sh" "$B" --quick --no-plots \
        --no-throttle "$@"
}
# start NAME ARGS...: bench ARGS... with OUT=$W/NAME, in the background, its output in
# $W/NAME.log; finish NAME waits for it and gives its status. The four runs start at once:
# each has its own OUT, servers and work directory (bench/lib.sh), and mostly waits (their
# clients' sleeps, the servers' starts), so together they take about as long as the first
# alone, where one after another took the CI tier's second lane a minute and more.
declare -A RUNS
start() {
    local name=$1
    shift
    OUT=$W/$name bench "$@" >"$W/$name.log" 2>&1 &
    RUNS[$name]=$!
}
finish() { wait "${RUNS[$1]}"; }
# A failed check ends the script: the runs still going are ended too (their timeouts, which
# pass the signal on to bench/run.sh, which stops its servers).
stop_runs() {
    local p
    for p in "${RUNS[@]}"; do pkill -TERM -P "$p" 2>/dev/null; done
}
trap stop_runs EXIT

# (mpicold has a run of its own, below)
start quick --families idle,calls,copy,overlap,mpi,fleet,managed,free,fleetc \
    --variant spinall:MPSSHIM_SPIN_CPUS=100000
MPSSHIM_BENCH_FAIL=mpsshim.calls1 start failed --families calls --pack
start servers --families fleetc --fleetc-spread --variant two:MPSSHIM_BENCH_SERVERS=2
MPSSHIM_CPUDRV_DEVICES=2 MPSSHIM_BENCH_FAIL=mpsshim.mpi_cold540.2.1 \
    start cold --families mpicold --points mpicold=2

out=$W/quick
finish quick || { tail -n 30 "$out.log"; fail "bench/run.sh --quick --variant"; }
md=$out/bench-results.md
for row in launch_sync_us "copy_htod_pinned_GBps 4 MiB" "copy_dtoh_registered_GBps 4 MiB" \
    "overlap_s processes=4" "mpi_gpu_loop_s ranks=2" "fleet_steps_per_s processes=2" \
    managed_pingpong_s free_max_ms "fleetc_steps_per_s processes=2"; do
    grep -q "^| $row |" "$md" || fail "no row $row"
done
# The MPI job ran (bench/fakempi where no mpirun is), the fleet's start at each count, and
# its CPU per step (fleet.py's own and the machine's).
for row in "mpi_gpu_loop_s ranks=2" "fleet_start_s processes=2" "fleet_cpu_us processes=2" \
    "fleet_client_cpu_us processes=2" "fleetc_cpu_us processes=2" \
    "fleetc_client_cpu_us processes=2"; do
    grep -E "^\| $row \|" "$md" | grep -qE '\| [0-9.]+( \([0-9.]+-[0-9.]+\))? \| n/a \| [0-9.]+' ||
        fail "no numbers in $row: $(grep "^| $row |" "$md")"
done
grep -q '^| figure .* | mpsshim/MPS | mpsshim-spinall |$' "$md" || fail "no column of the variant"
# The variant's cell: a median and its ratios to native and MPS (MPS is n/a here).
grep -E '^\| fleetc_steps_per_s processes=2 \|' "$md" | grep -qE '\| [0-9.]+ \([0-9.]+-[0-9.]+\) \[[0-9.]+, -\] \|$' ||
    fail "no number in the variant's fleetc cell: $(grep 'fleetc_steps_per_s processes=2' "$md")"
grep -q '^## What each variant of mpsshim would give' "$md" || fail "no table of the variants' goals"
grep -q "^variant_spinall	MPSSHIM_SPIN_CPUS=100000$" "$out/bench-info.txt" || fail "bench-info.txt"
grep -q 'server [0-9]* started with MPSSHIM_SPIN_CPUS=100000' "$out/bench-mpsshim-spinall.log" ||
    fail "the variant's server did not show its variable"
grep -q 'Spinning on (0 busy clients, 100000 CPUs)' "$out/bench-mpsshim-spinall.log" ||
    fail "the variant's server did not take its variable"
! grep -q 'MPSSHIM_SPIN_CPUS=100000' "$out/bench-mpsshim.log" || fail "plain mpsshim got the variable"
echo "quick run with a variant: $(grep -c '^| ' "$md") table lines"
! python3 -c "import matplotlib" 2>/dev/null || {
    python3 "$ROOT/bench/plot.py" "$out" && [ -s "$out/scaling.png" ] && [ -s "$out/fleetc.png" ]
} || fail "bench/plot.py"

out=$W/failed
finish failed && fail "a run with a failed run exited 0"
md=$out/bench-results.md
grep -E '^\| launch_sync_us \|' "$md" | grep -qE '\| [0-9.]+ 1 FAIL \|' ||
    fail "the cell of the failed run: $(grep '^| launch_sync_us' "$md")"
grep -E '^\| launch \+ sync' "$md" | grep -q 'mpsshim: 1 of 2 runs failed; on the runs measured: -' ||
    fail "the goal of the failed run: $(grep '^| launch + sync' "$md")"
grep -q "mpsshim calls1 failed (3); its whole output: bench-mpsshim.log" "$out/bench-summary.txt" ||
    fail "the summary does not name the failed run"
tar xzf "$out/bench-logs.tgz" -C "$out" bench-mpsshim.log || fail "no bench-mpsshim.log packed"
# The failed run's section of the log, from its first line to the failure added after it.
sed -n '/^=== mpsshim calls1: exit 3$/,/^=== mpsshim calls2/p' "$out/bench-mpsshim.log" >"$W/section"
for line in '^# callbench: ' '^metric launch_sync_us' '^FAIL bench/run.sh: failed on purpose'; do
    grep -q "$line" "$W/section" ||
        { cat "$W/section"; fail "the failed run's output is not whole in the log ($line)"; }
done
echo "a failed run: kept in the log, counted in its cell and its goal"

out=$W/servers
finish servers ||
    { tail -n 30 "$out.log"; fail "bench/run.sh --variant two:MPSSHIM_BENCH_SERVERS=2"; }
log=$out/bench-mpsshim-two.log
served() { # LOGDIR: clients the server logging there took, from the variant's log
    awk -v h="=== mpsshim-two daemon: $1/server.log" '$0 == h {f = 1; next} /^=== / {f = 0} f' \
        "$log" | grep -c "New client"
}
n0=$(served shim-log) n1=$(served shim-log1)
[ "$n0" -gt 0 ] && [ "$n1" -gt 0 ] || fail "two servers: clients served $n0 and $n1"
grep -E '^\| fleetc_steps_per_s processes=2 \|' "$out/bench-results.md" |
    grep -qE '\| [0-9.]+ \([0-9.]+-[0-9.]+\) \[[0-9.]+, -\] \|$' ||
    fail "no number in the two-server variant's fleetc cell"
! grep -q 'started with MPSSHIM_BENCH_SERVERS' "$log" ||
    fail "a server was started with MPSSHIM_BENCH_SERVERS"
grep -q 'us of host work spread between, 8 launches' "$out"/bench-figures.tsv ||
    fail "fleetc's figure does not say its host work was spread"
grep -q 'us of host work spread between and 8 launches per step' "$log" ||
    fail "fleetc was not run with --spread"
echo "a variant over two servers: $n0 and $n1 clients; fleetc's host work spread"

out=$W/cold
finish cold && fail "a run with a failed cold MPI job exited 0"
md=$out/bench-results.md
for fig in mpi_cold75_s mpi_cold75_2gpu_s; do
    grep -E "^\| $fig ranks=2 \|" "$md" |
        grep -qE '\| [0-9.]+ \([0-9.]+-[0-9.]+\) \| n/a \| [0-9.]+ \([0-9.]+-[0-9.]+\) \|' ||
        { tail -n 30 "$out.log"; fail "no numbers in $fig: $(grep "^| $fig " "$md")"; }
done
grep -E '^\| mpi_cold540_s ranks=2 \|' "$md" | grep -qE '\| n/a \| [0-9.]+ 1 FAIL \|' ||
    fail "the cell of the failed cold job: $(grep '^| mpi_cold540_s' "$md")"
grep -E '^\| cold MPI job, mpi_cold540_s' "$md" | grep -q 'mpsshim: 1 of 2 runs failed' ||
    fail "issue 29's goal of the failed job: $(grep '^| cold MPI job, mpi_cold540_s' "$md")"
log=$out/bench-mpsshim.log
# 3 figures x 2 repeats, a job each, every one cold, on one device or over two.
[ "$(grep -c '^=== mpsshim mpi_cold[0-9_a-z]*\.2\.[12]: exit' "$log")" = 6 ] ||
    fail "not one job per sample: $(grep '^=== mpsshim mpi_cold' "$log")"
[ "$(grep -c '^# mpi_steps: 2 ranks over 1 of 2 devices.*, cold: ' "$log")" = 4 ] &&
    [ "$(grep -c '^# mpi_steps: 2 ranks over 2 of 2 devices.*, cold: ' "$log")" = 2 ] ||
    fail "the jobs were not cold, or not on the devices asked: $(grep '^# mpi_steps' "$log")"
# One server for the family (warm server), 12 new clients (cold ranks).
[ "$(grep -c '^=== mpsshim daemon: shim-log/server.log' "$log")" = 1 ] ||
    fail "not one server for the whole family"
n=$(grep -c 'New client' "$log")
[ "$n" = 12 ] || fail "the server took $n clients, not 12 (2 ranks x 6 jobs)"
grep -q '^== mpicold: [0-9]* s in all' "$out/bench-summary.txt" || fail "the family's time unsaid"
echo "the cold MPI job: 6 jobs a mode, $n ranks new to one server, 2-GPU figure, a failed job counted"
