#!/usr/bin/env bash
# The CI tier (`make test`): no GPU. A server runs on the CPU test driver
# (build/cpudrv/libcuda.so.1) and real client processes run through the shim: the same
# programs as on the GPU, plus what only makes sense to test here (crashes, bad input,
# another user). Prints a line per test as it ends ([n/N], its time, the time so far), then
# the failures with the end of their logs and a summary; the table of every test goes to
# BUILD/test.log with the same lines. Exits non-zero if anything failed.
# Programs through other server settings: the main loop runs every program of the lists on
# the default server; tests/coalesce.sh and tests/moved_programs.sh run, of them, those that
# take the paths their setting changes (each script says which and why). With
# MPSSHIM_CI_FULL=1 (`make test-full`) they run every program, as this tier did until
# 2026-12 (on two cores they took 81 and 56 s so, against 45 and 16 s for the chosen ones).
# The CPU test driver is a test double: nothing here is evidence about GPUs.
set -u
B=${1:-build}
B=$(cd "$B" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/mpsshim-ci.XXXXXX)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
use_dir "$WORK"
# The programs' direct runs on the CPU test driver, kept for the scripts that compare with
# them again (tests/lib.sh, direct_run).
export MPSSHIM_DIRECT_CACHE=$WORK/direct
declare -a NAMES RESULTS TIMES
FAILED=0
TOOK="" # seconds the test being recorded took, where run_test timed it

LOG=$B/test.log
: >"$LOG"
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
note() { printf '%s\n' "$*" >>"$LOG"; } # the log only

# About how many tests run (the count is only known at the end: rows run in loops over the
# program lists, and some only where others passed): the last complete run's count in this
# build, else the rows the script and the lists name.
expected_rows() {
    if [ -s "$B/.ci-rows" ]; then
        cat "$B/.ci-rows"
        return
    fi
    local own lists
    own=$(grep -cE '^ *(run_test|record) [a-z]' "$ROOT/tests/ci.sh")
    lists=$(cat "$ROOT/tests/progs/programs.txt" "$ROOT/tests/cudart/programs.txt" |
        awk '!/^ *(#|$)/ { n++; if (/\| *(cpu-)?both/ || /\.shared/) n++ } END { print n + 0 }')
    echo "~$((own + lists))"
}
EXPECT=$(expected_rows)

# record NAME STATUS [detail]: in the table; a line saying so, numbered in the order tests
# end in any lane (a test of another lane than the first goes to the table at lane_join).
record() {
    NAMES+=("$1")
    RESULTS+=("$2${3:+ ($3)}")
    TIMES+=("$TOOK")
    [ "$2" = PASS ] || [ "$2" = SKIP ] || FAILED=1
    [ -z "${LANE:-}" ] || printf '%s\t%s\t%s\n' "$1" "$2${3:+ ($3)}" "$TOOK" >>"$WORK/lane$LANE.tsv"
    echo "$1" >>"$WORK/ended"
    say "[$(wc -l <"$WORK/ended")/$EXPECT] ${LANE:+(lane $LANE) }$1: $2${3:+ ($3)}${TOOK:+, $TOOK s}; $SECONDS s so far"
    TOOK=""
}

# lane_start FUNCTION: runs FUNCTION's tests in a lane of their own (2, 3, ...) beside the
# rest (a subshell, which the EXIT trap's cleanup does not reach: the tests' own timeouts
# bound it); lane_join waits for every lane and adds their results to the table.
LANE_PIDS=()
lane_start() {
    local n=$((${#LANE_PIDS[@]} + 2))
    : >"$WORK/lane$n.tsv"
    (
        LANE=$n
        "$1"
    ) &
    LANE_PIDS+=($!)
}
lane_join() {
    local i name result took
    for i in "${!LANE_PIDS[@]}"; do
        wait "${LANE_PIDS[$i]}"
        while IFS=$'\t' read -r name result took; do
            NAMES+=("$name")
            RESULTS+=("$result")
            TIMES+=("$took")
            case $result in PASS* | SKIP*) ;; *) FAILED=1 ;; esac
        done <"$WORK/lane$((i + 2)).tsv"
    done
    LANE_PIDS=()
}

# descendants PID: the processes below PID, one per line.
descendants() {
    local c
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}

# stacks_on_hang PID SECS FILE: if PID still runs SECS s from now, writes to FILE the stacks
# of every process below it and of every mpsshim server (gdb, where installed; the kernel's
# wait channels otherwise), so that a test that hangs on a machine where nobody watched it
# says where. Stopped (SIGTERM) when the test ends first.
stacks_on_hang() {
    sleep "$2" &
    local s=$!
    trap 'kill $s 2>/dev/null; exit 0' TERM
    wait "$s"
    kill -0 "$1" 2>/dev/null || exit 0
    local p t
    for p in $(descendants "$1") $(pgrep -x mpsshim-server); do
        echo "== process $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
        for t in /proc/"$p"/task/*; do
            echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null) waits in $(cat "$t/wchan" 2>/dev/null)"
        done
        command -v gdb >/dev/null &&
            timeout 30 gdb -p "$p" -batch -ex "thread apply all bt 16" 2>/dev/null | grep "^#\|^Thread"
    done >"$3" 2>&1
}

# run_test NAME TIMEOUT CMD...: PASS when CMD exits 0 (77 = SKIP); output in $WORK/NAME.log
# (and, if it timed out, the stacks of its processes and the servers in $WORK/NAME.stacks).
run_test() {
    local name=$1 secs=$2
    shift 2
    local t0=$SECONDS
    timeout -k 5 "$secs" "$@" >"$WORK/$name.log" 2>&1 </dev/null &
    local tpid=$!
    stacks_on_hang "$tpid" "$((secs > 6 ? secs - 3 : secs))" "$WORK/$name.stacks" &
    local wpid=$!
    wait "$tpid"
    local rc=$?
    kill "$wpid" 2>/dev/null
    wait "$wpid" 2>/dev/null
    TOOK=$((SECONDS - t0))
    [ -s "$WORK/$name.stacks" ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && rm -f "$WORK/$name.stacks"
    case $rc in
    0) record "$name" PASS ;;
    77) record "$name" SKIP "$(tail -n 1 "$WORK/$name.log")" ;;
    124 | 137)
        record "$name" FAIL "timed out after ${secs}s"
        tail -n 20 "$WORK/$name.log"
        [ -s "$WORK/$name.stacks" ] && cat "$WORK/$name.stacks"
        ;;
    *) record "$name" FAIL "exit $rc"; tail -n 20 "$WORK/$name.log" ;;
    esac
}

# program_line PREFIX CMD MODE: from a programs.txt line, NAME (PREFIX + the command with
# its arguments) and ARGV; fails for blank and comment lines.
program_line() {
    local cmd mode
    [[ $2 =~ ^[[:space:]]*# ]] && return 1 # before xargs, which trips on quotes in comments
    cmd=$(echo "$2" | xargs)
    mode=$(echo "$3" | xargs)
    [ -z "$cmd" ] || [ "${cmd#\#}" != "$cmd" ] && return 1
    NAME=$1$(echo "$cmd" | tr ' ' '_' | tr -cd 'A-Za-z0-9_.-')
    MODE=$mode
    read -r -a ARGV <<<"$cmd"
}

# same_output NAME EXPECTED ACTUAL WHY: records NAME as PASS when the two logs are identical,
# else FAIL with WHY and the start of the diff.
same_output() {
    if ! [ -f "$2" ]; then
        record "$1" FAIL "no $2 to compare with"
    elif diff -u "$2" "$3" >"$WORK/$1.diff"; then
        record "$1" PASS
    else
        record "$1" FAIL "$4"
        head -n 20 "$WORK/$1.diff"
    fi
}

# start_server: the server of the tests below; non-zero if it did not start.
start_server() {
    "$CTL" -d || return 1
    [ -S "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" ]
}

cleanup() {
    [ ${#LANE_PIDS[@]} = 0 ] || kill "${LANE_PIDS[@]}" 2>/dev/null # interrupted: their tests time out
    stop_server 10 >/dev/null 2>&1
    if [ "$FAILED" = 0 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

say "mpsshim CI tier: CPU test driver behind the server (no GPU; nothing here measures a GPU)"

# ---------------------------------------------------------------- no server needed
run_test unit-channel 60 "$B/tests/unit/channel_test"
run_test unit-ranges 60 "$B/tests/unit/ranges_test"
run_test unit-physical 60 "$B/tests/unit/physical_test"
run_test unit-owned 60 "$B/tests/unit/owned_test"
run_test procaddr-vs-driver 60 env MPSSHIM_AUTOSTART=0 MPSSHIM_DRIVER=/nonexistent \
    MPSSHIM_PIPE_DIRECTORY="$WORK/none" "$B/tests/unit/procaddr_test" "$SHIM" \
    "$ROOT/gen/data/procaddress-580.159.04.tsv"
# Through a server, the answers are its driver's (server/code/procaddr.c): the CPU test driver
# answers as the 580 driver, so every row again; its start-up cost is in its log. Own server.
run_test procaddr-from-server 60 bash -c '
    dir='"$WORK"'/procaddr
    export MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log
    '"$CTL"' -d || exit 1
    '"$B"'/tests/unit/procaddr_test '"$SHIM"' '"$ROOT"'/gen/data/procaddress-580.159.04.tsv; rc=$?
    printf "quit\n" | '"$CTL"' >/dev/null
    grep "cuGetProcAddress: .* asked in" $dir/log/server.log || rc=1
    exit $rc'
# A server whose driver answers otherwise (the CPU test driver gives cuMemAlloc_v2 from 5000
# instead of 3020): the client follows it, not its compiled-in table. Own server.
run_test procaddr-follows-server-driver 60 bash -c '
    dir='"$WORK"'/procaddr-moved
    export MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log
    MPSSHIM_CPUDRV_PROCADDR=cuMemAlloc:3020:5000 '"$CTL"' -d || exit 1
    tsv='"$ROOT"'/gen/data/procaddress-580.159.04.tsv
    '"$B"'/tests/unit/procaddr_test '"$SHIM"' $tsv cuMemAlloc:3020:5000; rc=$?
    echo "against the compiled-in table instead (must differ):"
    '"$B"'/tests/unit/procaddr_test '"$SHIM"' $tsv | tail -n 2 | grep "cuMemAlloc flags 2 version 4020: got 0, cuMemAlloc; driver cuMemAlloc_v2" || rc=1
    printf "quit\n" | '"$CTL"' >/dev/null
    exit $rc'
# A fake server's tables, good and damaged (tests/unit/procaddr_badserver.c): the client
# follows a good one and answers from its compiled-in table when one is malformed.
run_test procaddr-bad-server 60 "$B/tests/unit/procaddr_badserver" "$SHIM" "$WORK/badserver"
run_test cpudrv-selftest 120 "$B/cpudrv/selftest" "$B/tests"
# ---------------------------------------------------------------- the second and third lanes
# The tests of these two lanes each work in directories and with servers of their own and
# none asserts a duration, so they run beside the tests below (which have servers of their
# own or the shared one), three lanes at once: most tests mostly wait (for their kernels,
# timeouts, servers), and on two cores one lane beside the main one left the CPUs idle for
# about two thirds of the tests' time. The second: the programs' direct runs, builds, checks
# of the tree and packaging, fuzzing, and a few tests of a server of their own; the third:
# the programs through other servers' settings, the benchmark scripts, traces and control
# commands. Each lane's tests are chosen so that the three end at about the same time (by the
# times in BUILD/test.log's table). Their results join the table at the end (lane_join); a
# line per test as it ends, as for the others.
cpu_lane() {
    # Every `both` and `cpu-both` program straight on the CPU test driver passes; their outputs
    # are kept for the main loop's comparisons and those of the third lane's scripts
    # (tests/direct_runs.sh; tests/lib.sh, direct_run), made here beside the main lane's tests.
    run_test direct-runs 300 bash "$ROOT/tests/direct_runs.sh" "$B" "$WORK"
    # The unit tests, the raw protocol tests and a few programs once more against a server built
    # with ASan and UBSan (own build in BUILD-asan, own server).
    run_test asan-protocol 600 bash "$ROOT/tests/asan.sh" "$B"
    # A PROFILE=1 STAMPS=1 build (own build directory, own server): the client and the server
    # report where their waits went (channel/prof.h), and note each request's moments, which
    # bench/stamps.py joins (channel/stamp.h): the launch's row, its stages' signs whatever
    # they are (a stage is a difference of two threads' clocks, which a loaded machine's
    # scheduling may order either way).
    run_test profile-build 300 bash -c '
        P='"$B"'-prof
        mkdir -p $P
        rm -rf /tmp/mpsshim-stamps
        make -C '"$ROOT"' --no-print-directory B=$P PROFILE=1 STAMPS=1 -j"$(nproc)" $P/mpsshim-server \
            $P/mpsshim-control $P/libmpsshim.so >$P/make.log 2>&1 || { tail -n 20 $P/make.log; exit 1; }
        dir='"$WORK"'/prof
        out=$(env MPSSHIM_SERVER=$P/mpsshim-server MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log \
              LD_PRELOAD=$P/libmpsshim.so '"$B"'/tests/vecadd 100000 2>&1)
        echo "$out"
        printf "quit\n" | MPSSHIM_PIPE_DIRECTORY=$dir $P/mpsshim-control >/dev/null
        for i in $(seq 50); do grep -q "Server profile" $dir/log/server.log && break; sleep 0.1; done
        grep "profile" $dir/log/server.log
        echo "$out" | grep -q "^PASS vecadd" && echo "$out" | grep -q "^mpsshim profile (client" &&
            grep -q "Client process [0-9]* profile: [0-9]* records" $dir/log/server.log &&
            grep -q "Client process [0-9]* profile by operation: [a-zA-Z0-9_-]* [0-9]* x" \
                $dir/log/server.log &&
            grep -q "Server profile, all workers: waits" $dir/log/server.log &&
            st=$(python3 '"$ROOT"'/bench/stamps.py --gen $P/gen /tmp/mpsshim-stamps) &&
            echo "$st" && echo "$st" | grep -Eq "^op:launch +[1-9][0-9]* +-?[0-9.]+ +-?[0-9.]+ +-?[0-9.]+ "'
    # libFuzzer with ASan and UBSan over what reads client bytes (a short run; the closing
    # notes report long ones): the call decoder, the image parsers, the copy planner, and the
    # server's own operations as sequences of records of two clients (fuzz_server: 15000 inputs
    # at most, 15 s at most, of the CI's time).
    if ls "$B"/fuzz/fuzz_* >/dev/null 2>&1; then
        run_test fuzz-short 360 env FUZZ_SERVER_RUNS=15000 FUZZ_SERVER_SECONDS=15 \
            bash "$ROOT/tests/fuzz/run.sh" "$B" 100000
        # What fuzz_server found (issue 34), each as the raw client that did it: a departed
        # client's waits (host functions numbered out of order, two values on one word, a word
        # freed under its wait) must not outlive it and hold another client's module load; a
        # stream priority of INT_MIN must not overflow the server's arithmetic.
        run_test fuzz-findings 120 bash -c '
            for f in hostfn_seq waitvalue "waitfree ctx" "waitfree free" priority; do
                bash '"$ROOT"'/tests/fuzz/repro.sh '"$B"' $f || { echo "FAIL $f"; exit 1; }
            done'
    else
        record fuzz-short FAIL "no fuzz targets in $B/fuzz: make B=... fuzz (needs clang)"
    fi
    # The tree is as `make format` leaves it: the files and the clang-format version are
    # tools/format.sh's, which names the files that are not (fix: make format).
    run_test format-clean 120 bash "$ROOT/tools/format.sh" check
    run_test exported-symbols 30 bash "$ROOT/tests/symbols.sh" "$SHIM" "$ROOT/cuda_symbols.txt"
    # A newer CUDA 13.x cuda.h (here: ours with one call more): the generator builds the call as
    # unsupported with one warning, and the shim exports it.
    run_test generator-newer-header 60 bash -c '
        inc='"$WORK"'/newer-include; mkdir -p $inc; cp '"${CUDA:-/usr/local/cuda}"'/include/*.h $inc/
        echo "CUresult CUDAAPI cuCallFromANewerToolkit(CUdevice dev, int *value);" >>$inc/cuda.h
        out=$(python3 '"$ROOT"'/gen/gen.py --cuda-include $inc --symbols '"$ROOT"'/cuda_symbols.txt \
              --procaddr '"$ROOT"'/gen/data/procaddress-580.159.04.tsv --cc cc --out '"$WORK"'/newer-gen 2>&1)
        echo "$out"
        echo "$out" | grep -q "warning: cuCallFromANewerToolkit is declared in cuda.h but not listed" &&
            grep -q "SHIM_UNSUPPORTED(cuCallFromANewerToolkit" '"$WORK"'/newer-gen/shim_stubs.c &&
            grep -q "cuCallFromANewerToolkit;" '"$WORK"'/newer-gen/shim_exports.map'
    # `make describe` for a sync, an async, a manual, a twin, an unsupported and an unknown call:
    # each output has its parts (tests/describe.sh).
    run_test describe-calls 120 bash "$ROOT/tests/describe.sh"
    # docs/support.md, committed for readers on the web, is what `make doc` writes from
    # cuda_symbols.txt today.
    run_test support-doc-current 30 bash -c '
        cd '"$ROOT"' && python3 gen/support.py --symbols cuda_symbols.txt | diff -u docs/support.md - ||
            { echo "docs/support.md is not current: run make doc"; exit 1; }'
    # docs/settings.md likewise, from the settings table as the server prints it.
    run_test settings-doc-current 30 bash -c '
        cd '"$ROOT"' && "'"$B"'/mpsshim-server" --settings | python3 gen/settings_doc.py |
            diff -u docs/settings.md - || { echo "docs/settings.md is not current: run make doc"; exit 1; }'
    # The user docs: no dead relative link, no #anchor without its heading, no named path of
    # the tree that is gone (tools/check_docs.py).
    run_test docs-links 30 bash -c 'cd '"$ROOT"' && python3 tools/check_docs.py README.md docs/*.md \
        bench/README.md bench/results/README.md \
        docs/man/*.md debian/README'
    # tests/deps.sh against stand-ins for apt-get: nothing asked when nothing is missing, only
    # what is missing otherwise, apt-get's own words when it fails.
    run_test deps-check 60 bash "$ROOT/tests/deps_test.sh"
    # The GPU machine's CPU-time tools: the sampler and its summary on a program of known
    # shape, then bench/cpusplit.py's plumbing (tests/profsample.sh).
    run_test profsample 120 bash "$ROOT/tests/profsample.sh" "$B" "$WORK"
    # make install into a temporary DESTDIR; the installed programs and shim find each other
    # and serve a client; the man pages cover --help; make uninstall leaves nothing. Own servers.
    run_test install-uninstall 120 bash "$ROOT/tests/install.sh" "$B"
    # dpkg-buildpackage in a copy of the tree; the package's files, --version and the demo
    # from the unpacked .deb (tests/deb.sh). Own server.
    run_test deb-package 120 bash "$ROOT/tests/deb.sh" "$B"
    # MPS's own scripts (the guide's PBS prologue and epilogue, as root; its single-user
    # sequence, as a user) against the names make install-mps-compat installs into a temporary
    # PREFIX (docs/mps-compat.md). Own servers, in directories of its own.
    run_test mps-compat-scripts 120 bash "$ROOT/tests/mps_compat.sh" "$B"
    # The systemd units as installed, through systemd-analyze verify (nothing is started).
    run_test systemd-units 60 bash "$ROOT/tests/systemd.sh" "$B"
    # The Slurm prolog, epilog and task prolog under a real single-node Slurm (installed when
    # missing; SKIP when it cannot be): one job of 3 tasks served by one per-job server, which
    # the epilog stops. Own daemons, ports and directories.
    run_test slurm-job 240 bash "$ROOT/tests/slurm.sh" "$B"
    # The Slurm prolog and epilog against a hostile job user (issue 34): a server.pid naming
    # another user's server, a link where the prolog writes its log. Run as Slurm runs them,
    # as root, for two users made for the test (SKIP when not root). Own servers, directories.
    run_test slurm-hostile 120 bash "$ROOT/tests/slurm_hostile.sh" "$B"
    # A short soak (tests/soak.sh; the GPU one is make soak SECONDS=600 CLIENTS=32): 8 clients
    # at once for 20 s, one in a few killed, every other one passing, the server back where it
    # started. Own server.
    run_test soak-short 120 bash "$ROOT/tests/soak.sh" "$B" 20 8
    # What the driver keeps in a long-lived context goes back when idle: the server starts
    # afresh in the same process (pid, settings and descriptors as at start), clients and a
    # SIGTERM that arrive meanwhile are not lost, and a connected client or an open control
    # session keep it as it is. Own server.
    run_test recycle 90 bash "$ROOT/tests/recycle.sh" "$B" "$WORK"
    # A client's repeated launch sequences are replayed as graphs (server/code/seqgraph.c) with
    # the results of launches one by one, held launches let go by themselves; off with
    # MPSSHIM_LAUNCH_GRAPHS=0. Own servers.
    run_test launch-graphs 60 bash "$ROOT/tests/launchseq.sh" "$B" "$WORK"
}
lane_start cpu_lane
servers_lane() {
    # A client that leaves while another's kernel waits for that other's next launch: its host
    # memory, registered in the server's quiet context, is unregistered there, and its library
    # whose code ran is kept, so the launch goes on (on the CPU test driver as on an H200, an
    # unregistration of memory registered in the shared context, and an unload of such a library,
    # wait for its work and hold launches meanwhile); with MPSSHIM_QUIET_CONTEXT=0 or
    # MPSSHIM_KEEP_LIBRARIES=0 it does not. Own servers.
    run_test leave-beside 90 bash "$ROOT/tests/leave_beside.sh" "$B" "$WORK"
    # cuMemAlloc from the server's arena (the default), its pool (off for good) and the
    # driver's own (MPSSHIM_DEVICE_VMM=0), on a CPU driver whose cuMemFree waits for the whole
    # context: the programs that allocate in many ways through each, and a free beside another
    # client's waiting work (server/memory/devmem.c). Own servers; free_wait's bound is 15 s,
    # not a timing.
    run_test device-arena-programs 300 bash "$ROOT/tests/devpool.sh" "$B" "$WORK" arena
    run_test device-pool-programs 300 bash "$ROOT/tests/devpool.sh" "$B" "$WORK" pool
    run_test device-driver-programs 300 bash "$ROOT/tests/devpool.sh" "$B" "$WORK" driver
    # The programs through a process's GPUs' own servers, the default where a pipe directory's
    # server holds several GPUs: those that take the paths a move changes (every one with
    # MPSSHIM_CI_FULL=1), one server's output, or the documented refusal
    # (tests/moved_programs.sh; own servers).
    run_test moved-programs 300 bash "$ROOT/tests/moved_programs.sh" "$B" "$WORK"
    # The same from one pipe directory: a client that sees one GPU is served by that GPU's own
    # server, which it starts (MPSSHIM_SERVER_PER_GPU; tests/server_per_gpu.sh).
    run_test server-per-gpu 90 bash "$ROOT/tests/server_per_gpu.sh" "$B" "$WORK"
    # The benchmark scripts' plumbing, not their numbers: bench/run.sh --quick on the CPU test
    # driver with a variant of mpsshim, then with one run failed on purpose, then the cold MPI job
    # (bench/fakempi where no MPI is) on two devices (tests/bench_scripts.sh).
    run_test bench-scripts 540 bash "$ROOT/tests/bench_scripts.sh" "$B" "$WORK"
    # GPU timelines (`trace start|stop|status`): the summary and file on known records, then the
    # whole path on the CPU test driver's stand-in for CUPTI with four clients at once; no CUPTI:
    # said, and the server serves on. Own servers.
    run_test trace 120 bash "$ROOT/tests/trace.sh" "$B" "$WORK"
    # Every unthrottled client's streams in a green context of its own (MPSSHIM_GREEN_EACH=1,
    # server/limits/green.c, an experiment): the test programs that use streams in many ways through
    # such a server. Own server.
    run_test green-each-programs 400 bash "$ROOT/tests/green_each.sh" "$B" "$WORK"
    # Control commands, logs, the client cap and terminate_client (tests/control.sh): own
    # servers; its waits poll for a state, nothing asserts a duration.
    run_test control-logs-cap-terminate 600 bash "$ROOT/tests/control.sh" "$B"
    # A crowded server's defaults (coalesced doorbells, replies from the GPU, steps as
    # graphs), the server counting itself crowded with one busy client: the programs whose
    # work takes its paths (tests/coalesce.sh says which; every one with MPSSHIM_CI_FULL=1),
    # one of them waiting for its kernel by polling mapped memory with no call that would ring;
    # the GPU's replies while crowded, and the worker's with MPSSHIM_CROWDED_GPU_REPLIES=0. Own
    # servers, in directories of its own. (Beside another lane's load it found a race of
    # managed variables' pulls: interpose/mvars.c.)
    run_test coalesce-programs 200 bash "$ROOT/tests/coalesce.sh" "$B" "$WORK"
    # Registrations where the server's own mappings would be, address randomisation off
    # (server/core/clientspace.c, interpose/spread.c). Own servers, directories of its own.
    run_test client-space 120 bash "$ROOT/tests/clientspace.sh" "$B" "$WORK"
    # A driver call that never returns is named in the log (whose, which, its thread) and the
    # stacks SIGUSR2 asks for come one thread after another. Own server.
    run_test stall-watch 60 bash "$ROOT/tests/stall_watch.sh" "$B" "$WORK"
}
lane_start servers_lane

run_test no-server-no-driver 30 bash -c '
    out=$(env LD_PRELOAD='"$SHIM"' MPSSHIM_AUTOSTART=0 MPSSHIM_DRIVER=/nonexistent \
          MPSSHIM_PIPE_DIRECTORY='"$WORK"'/none '"$B"'/tests/vecadd 2>&1)
    echo "$out"
    echo "$out" | grep -q "mpsshim: no server at .*no real CUDA driver found" &&
        echo "$out" | grep -q "^FAIL"'
# No server and none may be started: the program still runs, on the real driver (here
# the CPU test driver), and says so once.
run_test fallback-to-driver 60 bash -c '
    out=$(env LD_PRELOAD='"$SHIM"' MPSSHIM_AUTOSTART=0 MPSSHIM_PIPE_DIRECTORY='"$WORK"'/none \
          '"$B"'/tests/vecadd 100000 2>&1)
    echo "$out"
    [ "$(echo "$out" | grep -c "running directly on the CUDA driver")" = 1 ] &&
        echo "$out" | grep -q "^PASS vecadd"'
# A client that may not start a server waits for one for MPSSHIM_SERVER_WAIT seconds (the
# k8s recipe's); bad values are said. Own server.
run_test server-wait 60 bash "$ROOT/tests/server_wait.sh" "$B" "$WORK"
# Every setting of the table fed a bad value: said, naming the variable as set; the server
# starts on its defaults, a client runs, or is refused for a bad limit of its own.
run_test settings 60 bash "$ROOT/tests/settings.sh" "$B" "$WORK"
# 32 clients start at once with no server: exactly one server starts, all are served.
run_test autostart-race 120 bash -c '
    dir='"$WORK"'/race
    pids=""
    for i in $(seq 32); do
        env LD_PRELOAD='"$SHIM"' MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log \
            '"$B"'/tests/vecadd 1000 >'"$WORK"'/race-$i.log 2>&1 &
        pids="$pids $!"
    done
    rc=0
    for p in $pids; do wait $p || rc=1; done
    passed=$(cat '"$WORK"'/race-*.log | grep -c "^PASS vecadd")
    servers=$(grep -l "MPSSHIM_PIPE_DIRECTORY=$dir" /proc/[0-9]*/environ 2>/dev/null |
              while read -r e; do p=${e%/environ}; [ "$(cat $p/comm 2>/dev/null)" = mpsshim-server ] && echo $p; done | wc -l)
    started=$(grep -c "Server ready" $dir/log/server.log)
    echo "$passed of 32 clients passed; $servers server process(es) for the directory, $started started"
    printf "quit\n" | MPSSHIM_PIPE_DIRECTORY=$dir '"$CTL"'
    [ $rc = 0 ] && [ "$passed" = 32 ] && [ "$servers" = 1 ] && [ "$started" = 1 ]'
# A slow DMA engine (each copy waits 20 ms before it moves bytes) behind a client whose
# pageable copies run through every staging slot and around again: no slot may be
# refilled before the copy reading it ran. Own server, for the driver's setting.
run_test staging-slow-dma 120 bash -c '
    dir='"$WORK"'/slowdma
    env LD_PRELOAD='"$SHIM"' MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log \
        MPSSHIM_CPUDRV_COPY_DELAY_US=20000 '"$B"'/tests/vecadd 5000000
    rc=$?
    printf "quit\n" | MPSSHIM_PIPE_DIRECTORY=$dir '"$CTL"' >/dev/null
    exit $rc'
# A server started on demand keeps none of its starter's descriptors (here fd 9, open on
# a marker file): one holding an application's pipe would keep its readers from EOF.
run_test autostart-closes-fds 60 bash -c '
    dir='"$WORK"'/fds
    exec 9>'"$WORK"'/fds-marker
    env LD_PRELOAD='"$SHIM"' MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log \
        '"$B"'/tests/vecadd 1000 || exit 1
    pid=$(grep -l "MPSSHIM_PIPE_DIRECTORY=$dir" /proc/[0-9]*/environ 2>/dev/null |
          while read -r e; do p=${e%/environ}; [ "$(cat $p/comm 2>/dev/null)" = mpsshim-server ] && echo ${p#/proc/}; done)
    fds=$(ls -l /proc/$pid/fd 2>&1)
    echo "$fds"
    printf "quit\n" | MPSSHIM_PIPE_DIRECTORY=$dir '"$CTL"' >/dev/null
    [ -n "$pid" ] && echo "$fds" | grep -q "server.log" && ! echo "$fds" | grep -q fds-marker'
# The pipe directory must be ours alone: one others may write to, or a link, is refused;
# a link planted in place of a log is not followed (-d then refuses to start, naming it).
run_test pipe-dir-private 60 bash -c '
    d='"$WORK"'/shared-pipe; mkdir -p $d; chmod 777 $d
    out=$(MPSSHIM_PIPE_DIRECTORY=$d MPSSHIM_LOG_DIRECTORY=$d/log '"$CTL"' -d 2>&1); rc=$?
    echo "$out"
    [ $rc != 0 ] && echo "$out" | grep -q "may be written by other users" || exit 1
    ln -s '"$WORK"' '"$WORK"'/linked-pipe
    out=$(MPSSHIM_PIPE_DIRECTORY='"$WORK"'/linked-pipe '"$CTL"' -d 2>&1); rc=$?
    echo "$out"
    [ $rc != 0 ] && echo "$out" | grep -q "symbolic link" || exit 1
    d='"$WORK"'/own-pipe; mkdir -p $d/log; chmod 700 $d
    echo victim > '"$WORK"'/victim; ln -s '"$WORK"'/victim $d/log/server.log
    out=$(MPSSHIM_PIPE_DIRECTORY=$d MPSSHIM_LOG_DIRECTORY=$d/log '"$CTL"' -d 2>&1); rc=$?
    echo "$out"
    [ $rc = 1 ] && echo "$out" | grep -q "cannot open the log $d/log/server.log" || exit 1
    [ "$(cat '"$WORK"'/victim)" = victim ]'
# A client uses only a server of its own user: root, given the pipe directory of a server
# another user started, does not hand it its calls (it runs on the driver, saying why).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    run_test client-refuses-foreign-server 60 bash -c '
        d='"$WORK"'/nobody-pipe; mkdir -p $d; chown 65534:65534 $d; chmod 700 $d
        chmod 755 '"$WORK"'; chmod -R a+rX '"$B"' 2>/dev/null
        setpriv --reuid=65534 --regid=65534 --clear-groups env MPSSHIM_PIPE_DIRECTORY=$d \
            MPSSHIM_LOG_DIRECTORY=$d/log '"$CTL"' -d || exit 1
        out=$(env LD_PRELOAD='"$SHIM"' MPSSHIM_PIPE_DIRECTORY=$d '"$B"'/tests/vecadd 1000 2>&1)
        echo "$out"
        printf "quit\n" | setpriv --reuid=65534 --regid=65534 --clear-groups \
            env MPSSHIM_PIPE_DIRECTORY=$d '"$CTL"' >/dev/null
        chmod 700 '"$WORK"'
        echo "$out" | grep -q "runs as user 65534, this process as user 0: not using it" &&
            echo "$out" | grep -q "^PASS vecadd"'
else
    record client-refuses-foreign-server SKIP "needs root and setpriv"
fi
# A server that crashes says so in its log, with its stack (server/core/log.c). Own server.
run_test crash-logged 30 bash -c '
    dir='"$WORK"'/crash
    export MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log
    '"$CTL"' -d || exit 1
    pid=$(cat $dir/server.pid)
    kill -SEGV $pid
    for i in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    grep -A3 "^\[crash Server $pid\] the server died: signal 11 (SEGV)" $dir/log/server.log |
        grep -q "mpsshim-server("'
# A client that leaves with a kernel that runs for ten minutes: the server gives up waiting
# after MPSSHIM_RELEASE_TIMEOUT (2 s here), logs what it leaves allocated and which stream
# still runs with its last kernel's name, serves the next
# client; once idle (MPSSHIM_RECYCLE_IDLE, 2 s here) it starts afresh, which ends that work
# and gives back what it held (device memory back to the start's), and quits. Own server.
run_test release-bounded 60 bash -c '
    dir='"$WORK"'/runaway
    export MPSSHIM_PIPE_DIRECTORY=$dir MPSSHIM_LOG_DIRECTORY=$dir/log
    MPSSHIM_RELEASE_TIMEOUT=2 MPSSHIM_RECYCLE_IDLE=2 '"$CTL"' -d || exit 1
    mem() { printf "get_server_status\n" | '"$CTL"' | awk "/^Device 0 memory used/ {print \$5}"; }
    m0=$(mem)
    env LD_PRELOAD='"$SHIM"' '"$B"'/tests/runaway 600 || exit 1
    for i in $(seq 100); do
        printf "get_server_status\n" | '"$CTL"' | grep -q "^Clients 0$" && break
        sleep 0.1
    done
    out=$(env LD_PRELOAD='"$SHIM"' '"$B"'/tests/vecadd 1000 2>&1); echo "$out"
    m1=$(mem)
    for i in $(seq 150); do grep -q "Started afresh" $dir/log/server.log && break; sleep 0.1; done
    grep "left running ends with the old contexts" $dir/log/server.log || exit 1
    m2=$(mem)
    echo "device 0 memory used: $m0 at start, $m1 with the work left running, $m2 after the fresh start"
    printf "quit\n" | '"$CTL"' >/dev/null
    [ "$m1" -gt "$m0" ] && [ "$m2" = "$m0" ] &&
    grep "still running" $dir/log/server.log &&
    grep "its legacy default stream still runs; the last kernel launched there: delay_set" $dir/log/server.log &&
        echo "$out" | grep -q "^PASS vecadd" && ! echo "$out" | grep -q "running directly"'
# Two clients flooding the server with async work behind long kernels, and a bystander:
# the server's memory stays under the bound MPSSHIM_QUEUE_LIMIT sets, everyone passes, and
# work waiting on a later call of its client is not held by the bound. Own server.
run_test queued-work-bounded 300 bash "$ROOT/tests/flood.sh" "$B" "$WORK"
# Graph-memory addresses of one graph in another (the driver's aliasing, seen on an H100): each
# graph runs on after the other goes, natively and through the shim alike.
run_test graphmem-aliased 200 bash "$ROOT/tests/graphmem_alias.sh" "$B" "$WORK"
# The spinning policy (server/core/spin.c): more busy clients than half the CPUs turn spinning
# off, and it comes back when they leave; the clients' results stay right. Own server.
run_test spin-policy 120 bash "$ROOT/tests/spin.sh" "$B" "$WORK"
# Idle answers the client knows (interpose/idle.c) give way to what only the server can
# tell it, with nothing sent since: a fault of the shared context, terminate_client, a
# server that quits (tests/idle.sh). Own servers.
run_test idle-answers-alerts 120 bash "$ROOT/tests/idle.sh" "$B" "$WORK"
# Pools destroyed with allocations outstanding never reach the driver so (it killed the
# server on an H100): the CPU test driver told to die on one; the server lives and
# releases. Own server.
run_test pool-destroyed-outstanding 200 bash "$ROOT/tests/pool_doom.sh" "$B" "$WORK"
# A client killed while its stream waits on its own host function, its server thread in a
# long driver call: another client's free that waits for the whole context is not held up
# (the main loop lets the dead client's host-function waits go). Own server.
run_test hostfn-death 90 bash "$ROOT/tests/hostfn_death.sh" "$B" "$WORK"
# Its twin on device memory: a client killed while its stream waits on a value in its device
# memory and other clients' calls wait for the whole device (a driver cuMemFree,
# cuMemHostUnregister, cuMemFreeHost); the CPU test driver's stream creation waits
# meanwhile, as an H200's did, so the release writes on a stream made at start. Own server.
run_test waitvalue-twin 90 bash "$ROOT/tests/waitvalue_twin.sh" "$B" "$WORK"
# A client that shrinks the memory it registered, with a stream waiting on it, then leaves:
# unsealed memfds and files are refused, the shim's sealed memfd cannot be shrunk, and the
# server (whose stores end the wait) lives on and serves a bystander. Own server.
run_test hostreg-shrink 90 bash "$ROOT/tests/hostreg_shrink.sh" "$B" "$WORK"
# What the server maps at addresses it chooses (clients' segments, pinned and managed memory)
# lies in its own address window, never where a client's cuMemHostRegister will want the
# same addresses; and it is gone once the client is released. Own server.
run_test server-window 60 bash "$ROOT/tests/server_window.sh" "$B" "$WORK"
# Code loaded while a client's stream is held on a value in its device memory: the load
# waits in the server, not in the driver (whose load, on the CPU test driver as on an H200,
# holds every launch and stream write meanwhile); the other clients go on, and the kill of
# the holding client lets it through. Own server.
run_test codegate 90 bash "$ROOT/tests/codegate.sh" "$B" "$WORK"
# A client's unregistration (a call that waits for every stream) while another client's
# stream is held on a host function whose page fault that client's own worker serves: the
# call waits in the server, both go on (found on an H200 by managed-kill). Own server.
run_test hostfn-gate 90 bash "$ROOT/tests/hostfn_gate.sh" "$B" "$WORK"
# A first launch of code loaded at start waits for no other client's work (issue 29).
run_test eager-load 90 bash "$ROOT/tests/eager.sh" "$B" "$WORK"
# Streams taken as busy without asking the driver never end a synchronisation early:
# idle_answers through a server whose streams stay fresh 1000 us (tests/fresh_streams.sh).
run_test fresh-streams 90 bash "$ROOT/tests/fresh_streams.sh" "$B" "$WORK"
# bench/onectx's modes (a diagnosis for the GPU, run by nothing else) still run and write what
# they should, directly and through the shim (graph nodes updated at every step). Own server.
run_test onectx-modes 90 bash "$ROOT/tests/onectx.sh" "$B" "$WORK"
# bench/launchcost and bench/hostmem (native probes, run by hand on a GPU) still run and print
# every figure, directly and through the shim. Own server.
run_test bench-probes 90 bash "$ROOT/tests/probes.sh" "$B" "$WORK"
# An MPI rank through the shim gets OMPI_MCA_mpi_yield_when_idle=1 unless set or turned off
# (interpose/mpiyield.c); other processes are left alone. No server.
run_test mpi-yield 30 bash "$ROOT/tests/mpi_yield.sh" "$B"
# The stack size the clients' kernels grew the shared context to goes back once no client
# is left (the driver never lowers it). Own server.
run_test stack-idle 60 bash "$ROOT/tests/stack_idle.sh" "$B" "$WORK"
run_test limits-load 120 bash "$ROOT/tests/limits_load.sh" "$B" "$WORK"
run_test limits 300 bash "$ROOT/tests/limits.sh" "$B" # memory limits, priority: own server
# Limits and counts of a process across its connections (issue 34: S5, S6, S9): own server.
run_test accounts 120 bash "$ROOT/tests/accounts.sh" "$B" "$WORK"
run_test visible-devices 120 bash "$ROOT/tests/devices.sh" "$B" # CUDA_VISIBLE_DEVICES: own server
# 40 idle control connections do not lock operators out, idle ones time out, and names and
# values from clients cannot forge log lines or control answers (issue 34). Own servers.
run_test control-hostile 180 bash "$ROOT/tests/control_hostile.sh" "$B"

# Batches of copies (1000; 3D: 300, and 16 with pageable sides) are one request each
# (tests/copybatch.sh).
run_test copybatch-one-request 60 bash "$ROOT/tests/copybatch.sh" "$B" "$WORK"

# 256 clients at once under the default client limit (worked out at start), a few working
# among them, all served; past a small MPSSHIM_MAX_CLIENTS the next client refused with
# CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, and so are clients past what a small RLIMIT_NOFILE
# holds (tests/many_clients.sh). Own servers.
run_test many-clients 180 bash "$ROOT/tests/many_clients.sh" "$B" "$WORK"

# A control command's answer grows past the old fixed 256 KiB, as ps's does for thousands of
# clients, and is cut only at its ceiling, sized from the client limit (tests/unit/answer_test.c).
run_test unit-answer 60 "$B/tests/unit/answer_test"

# Clients killed while their managed memory moves (issue 31), ten times at varied points, with
# a bystander's managed_migrate runs passing meanwhile; the server then holds nothing of them,
# serves on and quits cleanly (tests/managed_kill.sh). Own server.
run_test managed-kill-mid-move 120 bash "$ROOT/tests/managed_kill.sh" "$B" "$WORK"

# ---------------------------------------------------------------- server up
if ! start_server >"$WORK/server-start.log" 2>&1; then
    record server-start FAIL "see $WORK/server-start.log"
    cat "$WORK/server-start.log" "$MPSSHIM_LOG_DIRECTORY/server.log" 2>/dev/null
else
    record server-start PASS
    BASE_MEM=$(mem_used)

    # Every program of programs.txt through the shim; `both` and `cpu-both` ones also straight
    # on the CPU driver, and the two outputs must be identical.
    while IFS='|' read -r cmd mode; do
        program_line prog- "$cmd" "$mode" || continue
        prog=$B/tests/${ARGV[0]}
        run_test "$NAME" 150 env LD_PRELOAD="$SHIM" "$prog" "${ARGV[@]:1}"
        if [[ $MODE =~ ^(cpu-)?both$ ]] && [ "${RESULTS[-1]}" = PASS ]; then
            direct_run "$WORK/$NAME.direct.log" "$prog" "${ARGV[@]:1}"
            same_output "$NAME-same-output" "$WORK/$NAME.direct.log" "$WORK/$NAME.log" \
                "shim and direct runs differ"
        fi
    done <"$ROOT/tests/progs/programs.txt"
    # Managed memory the older way too (MPSSHIM_MANAGED_MIGRATE=0: host memory the GPU reads
    # over the bus), which a server without device virtual memory gives every client.
    run_test managed-bus-design 120 env MPSSHIM_MANAGED_MIGRATE=0 LD_PRELOAD="$SHIM" \
        "$B/tests/managed_migrate"

    # The hidden export tables, asked for by UUID as cudart does (tests/unit/export_test.c).
    run_test export-tables 60 "$B/tests/unit/export_test" "$SHIM" "$B/tests"

    # Every CUDA runtime program of tests/cudart/programs.txt through the shim: cudart reaches
    # the driver only through cuGetProcAddress and the export tables (a wrong integrity hash
    # fails every runtime call with error 103). A .shared build must print what its static
    # twin printed. (The CPU test driver cannot serve cudart directly, so the comparison with
    # a direct run is the GPU tier's.)
    while IFS='|' read -r cmd mode; do
        program_line cudart- "$cmd" "$mode" || continue
        run_test "$NAME" 300 env LD_PRELOAD="$SHIM" "$B/tests/cudart/${ARGV[0]}" "${ARGV[@]:1}"
        [ "${RESULTS[-1]}" = PASS ] || continue
        if [ "${ARGV[0]%.shared}" != "${ARGV[0]}" ]; then
            shared=$NAME
            program_line cudart- "${ARGV[0]%.shared} ${ARGV[*]:1}" "" # the static twin
            same_output "$shared-same-as-static" "$WORK/$NAME.log" "$WORK/$shared.log" \
                "static and shared cudart builds differ"
        fi
    done <"$ROOT/tests/cudart/programs.txt"

    # Four clients at once, results checked element by element by each.
    run_test four-clients 300 bash -c '
        pids=""
        for p in "vecadd 3000001" "memcpy_all --quick" "launch" "smallkern 3000"; do
            env LD_PRELOAD='"$SHIM"' '"$B"'/tests/$p >'"$WORK"'/fourc-$(echo $p | cut -d" " -f1).log 2>&1 &
            pids="$pids $!"
        done
        rc=0
        for p in $pids; do wait $p || rc=1; done
        grep -h "^PASS\|^FAIL" '"$WORK"'/fourc-*.log
        exit $rc'

    # A client killed while it holds virtual memory, graphs, pool memory and IPC exports
    # (--all), or textures, a surface and a mipmapped array (--textures): the checks below
    # find the tables empty and the memory back.
    for v in everything:--all textures:--textures; do
        run_test "kill-holding-${v%%:*}" 60 bash "$ROOT/tests/kill_held.sh" "$B" \
            "$WORK/hold-${v%%:*}.log" hold 600 "${v#*:}"
    done

    # A client killed while it holds graphs with conditional nodes (handles, bodies, a
    # nested conditional, an exec launched): its handles and body graphs go with it (the
    # tables-empty check below reads the server log).
    run_test kill-holding-conditional 60 bash "$ROOT/tests/kill_held.sh" "$B" \
        "$WORK/hold-conditional.log" graph_cond --hold

    # A client killed while it holds __managed__ variables (a module's and a library's, used
    # by a kernel, and one written by the host since): its modules, library and their globals
    # go with it, and the stream of its variables' copies (the tables-empty check below reads
    # the server log too).
    run_test kill-holding-managed-vars 60 bash "$ROOT/tests/kill_held.sh" "$B" \
        "$WORK/hold-mvars.log" --released "CUlibrary.*7 global memory" managed_vars --hold

    # Clients that leave (exit, or are killed) while a stream of theirs waits for a value
    # nothing will write (single waits, or a batch's): the server ends the waits and releases
    # them; the checks below then find the tables empty and the memory back.
    run_test leave-while-waiting 60 bash -c '
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/waitvalue_exit || exit 1
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/waitvalue_exit --kill; [ $? = 137 ] || exit 1
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/waitvalue_exit --batch || exit 1
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/waitvalue_exit --batch --kill; [ $? = 137 ] || exit 1
        for i in $(seq 100); do
            printf "get_server_status\n" | '"$CTL"' | grep -q "^Clients 0$" && exit 0
            sleep 0.1
        done
        echo "the clients were not released"; exit 1'

    # A client killed in the middle of large copies: the others finish correctly, and the
    # server frees everything the dead one had.
    run_test kill-mid-copy 120 bash -c '
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/smallkern 20000 >'"$WORK"'/bystander1.log 2>&1 & b1=$!
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/vecadd 2000003 >'"$WORK"'/bystander2.log 2>&1 & b2=$!
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/copy_victim >'"$WORK"'/victim.log 2>&1 & v=$!
        for i in $(seq 200); do grep -q ready '"$WORK"'/victim.log && break; sleep 0.05; done
        grep -q ready '"$WORK"'/victim.log || { echo "victim never got ready"; exit 1; }
        sleep 0.3
        kill -9 $v
        rc=0
        wait $b1 || rc=1
        wait $b2 || rc=1
        tail -n 1 '"$WORK"'/bystander1.log '"$WORK"'/bystander2.log
        exit $rc'
    # A client killed while its launched graph waits on its host node (whose function never
    # returns): another client's graphs with host nodes run meanwhile and after, and the
    # server releases the dead one's graph and exec (it sets the flags the graph waits on).
    run_test kill-in-host-node 120 bash -c '
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/graph_host --victim >'"$WORK"'/hn-victim.log 2>&1 & v=$!
        for i in $(seq 200); do grep -q ready '"$WORK"'/hn-victim.log && break; sleep 0.05; done
        grep -q ready '"$WORK"'/hn-victim.log || { echo "victim never got ready"; exit 1; }
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/graph_host >'"$WORK"'/hn-bystander.log 2>&1 & b=$!
        sleep 0.3
        kill -9 $v
        rc=0
        wait $b || rc=1
        tail -n 1 '"$WORK"'/hn-bystander.log
        env LD_PRELOAD='"$SHIM"' '"$B"'/tests/graph_host | tail -n 1 | grep -q "^PASS" || rc=1
        for i in $(seq 100); do
            grep -q "Client process $v: released .*CUgraphExec" '"$MPSSHIM_LOG_DIRECTORY"'/server.log && break
            sleep 0.1
        done
        grep "Client process $v: released" '"$MPSSHIM_LOG_DIRECTORY"'/server.log || rc=1
        exit $rc'
    # A client killed mid-capture holding a captured allocation (graph memory of a graph
    # still being built, and a stream capturing into it): the server ends the capture, and
    # the graph, its memory and their records go (the check below finds the tables empty
    # and the memory back).
    run_test kill-mid-capture 60 bash "$ROOT/tests/kill_held.sh" "$B" \
        "$WORK/capalloc-victim.log" --released graphmem capture_alloc --victim
    # A fault in the shared context (tests/fault.sh): every client of device 0 is told, the
    # new server takes over within a second, new clients are served, nothing is left over.
    run_test fault-containment 120 bash "$ROOT/tests/fault.sh" "$B" "$WORK"
    # The same in a foreground server (a service's main process, tests/fault_service.sh):
    # its pid outlives the fault as a keeper of the new server; quit and SIGTERM end all.
    run_test fault-service 90 bash "$ROOT/tests/fault_service.sh" "$B" "$WORK"
    # Faults in a row whose clients stay (tests/fault_chain.sh, issue 34 S10): at most 4
    # faulted servers at once, each ends its clients after MPSSHIM_FAULT_LINGER and exits.
    run_test fault-chain 120 bash "$ROOT/tests/fault_chain.sh" "$B" "$WORK"
    # The standby that takes over at a fault (tests/fault_standby.sh): recovery with each
    # MPSSHIM_STANDBY under a slow cuInit, and no standby left after quit, a fresh start or
    # SIGKILL of its server.
    run_test fault-standby 120 bash "$ROOT/tests/fault_standby.sh" "$B" "$WORK"
    # Two servers: one's fault never reaches the other's clients (tests/fault_servers.sh; on
    # a GPU machine, a server per GPU, the answer to a fault being the process's).
    run_test fault-servers 90 bash "$ROOT/tests/fault_servers.sh" "$B" "$WORK"
    # A reply from the GPU that fails behind its store (the context dying there, on request of
    # the CPU test driver): the fault is known before the thread goes on, so that its next
    # call answers it (tests/fault_reply.sh, 8 rounds). Own server.
    run_test fault-reply 120 bash "$ROOT/tests/fault_reply.sh" "$B" "$WORK"
    run_test tables-empty-after-kill 30 bash -c '
        for i in $(seq 100); do
            [ "$(printf "get_server_status\n" | '"$CTL"' | awk "/^Clients/ {print \$2}")" = 0 ] && break
            sleep 0.1
        done
        st=$(printf "get_server_status\n" | '"$CTL"')
        echo "$st"
        used=$(echo "$st" | awk "/^Device 0 memory used/ {print \$5}")
        echo "memory used $used, before any client '"$BASE_MEM"'"
        echo "$st" | grep -q "^Clients 0$" && [ "$used" = "'"$BASE_MEM"'" ] &&
            ! grep -q "tables not empty" '"$MPSSHIM_LOG_DIRECTORY"'/server.log'

    # Bad input: a client of another protocol version, garbage records, a silent client.
    run_test refuse-other-version 30 "$B/tests/unit/rawclient" version
    run_test drop-garbage-client 30 "$B/tests/unit/rawclient" garbage
    run_test drop-silent-client 30 "$B/tests/unit/rawclient" silent
    run_test hostile-calls 60 "$B/tests/unit/rawclient" hostile # wrapping spans, images
    run_test scribbled-lane 60 "$B/tests/unit/rawclient" scribble # handles from private memory
    run_test short-payloads 60 "$B/tests/unit/rawclient" payloads # the %op rows' size checks
    run_test drop-trickling-client 60 "$B/tests/unit/rawclient" trickle
    # Connections that never say hello, more than the client limit (worked out at start)
    # and than the bound on handshakes in progress, that + 64: a real client is still served
    # meanwhile.
    run_test served-past-silent-crowd 60 bash -c '
        n=$(printf "get_server_status\n" | '"$CTL"' | awk "/^Client limit/ {print \$3 + 64 + 40}")
        '"$B"'/tests/unit/rawclient crowd "${n:-150}" 8 & crowd=$!
        sleep 1
        out=$(env LD_PRELOAD='"$SHIM"' '"$B"'/tests/vecadd 1000 2>&1)
        echo "$out"
        wait $crowd
        echo "$out" | grep -q "^PASS vecadd" && ! echo "$out" | grep -q "running directly"'
    run_test fuzz-records 120 "$B/tests/unit/rawclient" fuzz 1 20000
    run_test serves-after-bad-clients 60 env LD_PRELOAD="$SHIM" "$B/tests/vecadd" 1000

    # Another user's client is refused with a message that says so (and then, like an MPS
    # client that finds no server of its own, runs directly on the driver).
    if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
        run_test refuse-other-user 30 bash -c '
            chmod 755 '"$WORK"' '"$MPSSHIM_PIPE_DIRECTORY"'
            chmod 777 '"$MPSSHIM_PIPE_DIRECTORY"'/mpsshim.sock
            chmod -R a+rX '"$B"' 2>/dev/null
            out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env LD_PRELOAD='"$SHIM"' \
                  '"$B"'/tests/vecadd 1000 2>&1)
            chmod 700 '"$MPSSHIM_PIPE_DIRECTORY"'
            echo "$out"
            echo "$out" | grep -q "runs as user 0, this process as user 65534: not using it" &&
                echo "$out" | grep -q "running directly on the CUDA driver"'
    else
        record refuse-other-user SKIP "needs root and setpriv"
    fi

    run_test launcher 60 bash -c '
        out=$('"$B"'/mpsshim-run -- '"$B"'/tests/vecadd 1000 2>&1)
        echo "$out"
        echo "$out" | grep -q "^PASS vecadd" && ! echo "$out" | grep -q "running directly"'
    run_test control-commands 30 bash -c '
        pid=$(cat '"$MPSSHIM_PIPE_DIRECTORY"'/server.pid)
        out=$(printf "get_server_list\nget_client_list $pid\nno_such_command\n" | '"$CTL"')
        echo "$out"
        [ "$(echo "$out" | head -n 1)" = "$pid" ] &&
            echo "$out" | grep -q "^Unknown command \"no_such_command\"$"'
    run_test log-format 10 bash -c '
        log='"$MPSSHIM_LOG_DIRECTORY"'/server.log
        re="^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} Server [0-9]+\] "
        grep -Ev "$re" "$log" && exit 1
        grep -Eq "${re}New client [0-9]+ connected" "$log" &&
            grep -Eq "${re}Client process [0-9]+ disconnected" "$log"'
    if stop_server 10; then
        record quit PASS
    else
        record quit FAIL "server still running after quit"
    fi
    [ -S "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" ] && record socket-removed FAIL || record socket-removed PASS
fi

lane_join
note ""
note "mpsshim CI tier (CPU test driver, no GPU)"
printf '%-44s %5s  %s\n' TEST SECS RESULT >>"$LOG"
for i in "${!NAMES[@]}"; do
    printf '%-44s %5s  %s\n' "${NAMES[$i]}" "${TIMES[$i]}" "${RESULTS[$i]}" >>"$LOG"
done
echo "${#NAMES[@]}" >"$B/.ci-rows"
npass=0 nfail=0 nskip=0
for r in "${RESULTS[@]}"; do
    case $r in PASS*) npass=$((npass + 1)) ;; SKIP*) nskip=$((nskip + 1)) ;; *) nfail=$((nfail + 1)) ;; esac
done
say "slowest: $(for i in "${!NAMES[@]}"; do [ -n "${TIMES[$i]}" ] && echo "${TIMES[$i]} ${NAMES[$i]}"; done |
    sort -rn | head -n 6 | awk '{ if (NR > 1) printf ", "; printf "%s %s s", $2, $1 }')"
say "$npass passed, $nfail failed, $nskip skipped, in $SECONDS s"
if [ "$FAILED" != 0 ]; then
    # Repeated last, with the end of each log, because a CI report may keep only the tail.
    for i in "${!NAMES[@]}"; do
        case ${RESULTS[$i]} in PASS* | SKIP*) continue ;; esac
        say "FAILED ${NAMES[$i]}: ${RESULTS[$i]}"
        [ -f "$WORK/${NAMES[$i]}.log" ] && tail -n 15 "$WORK/${NAMES[$i]}.log" | sed 's/^/    /'
        [ -s "$WORK/${NAMES[$i]}.stacks" ] &&
            grep -v "^#[0-9]* *0x[0-9a-f]* in ?? ()" "$WORK/${NAMES[$i]}.stacks" | head -n 150 | sed 's/^/    /'
    done
    say "FAILED; logs in $WORK, the table of every test in $LOG"
    exit 1
fi
say "all passed (the table of every test: $LOG)"
