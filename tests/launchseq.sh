#!/usr/bin/env bash
# Launch sequences replayed as graphs (server/code/seqgraph.c): tests/progs/launchseq through
# the shim on a server of its own, with a module's functions and with a library's kernels,
# must pass AND have had its repeated steps replayed as
# graphs (the server's log says how many at the client's exit), held launches included;
# with MPSSHIM_LAUNCH_GRAPHS=0 it passes with none replayed. (Its output against native's is
# compared by the programs' run, tests/progs/programs.txt.)
# The server allows launches of a sequence 100 ms apart (MPSSHIM_LAUNCH_GRAPH_GAP_US; 20 us by
# default): on a loaded machine of two CPUs the client is descheduled mid-step, its sequences
# would be taken for an interpreter's and never replayed. What is checked is the mechanism
# (steps found, held, replayed with new values, results right), not the machine's timing.
# Again with MPSSHIM_LAUNCH_GRAPH_HOLD_SLEEP=1 (`1s`): the holding worker sleeps on its ring
# between the held launches, which must wake it as they come. Last, the gap rule: a sequence
# whose launches come further apart than it allows is never a graph, unless the server is
# crowded and coalescing doorbells, when the coalescing bound is the rule's.
#   tests/launchseq.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
real_driver_if_gpu
for mode in 1 0 1s; do
    graphs=${mode%s}
    sleep_hold=0
    [ "$mode" = 1s ] && sleep_hold=1
    own_dir "$2/launchseq-$mode"
    MPSSHIM_LAUNCH_GRAPHS=$graphs MPSSHIM_LAUNCH_GRAPH_GAP_US=100000 \
        MPSSHIM_LAUNCH_GRAPH_HOLD_SLEEP=$sleep_hold "$CTL" -d || exit 1
    shim "$B/tests/launchseq" >"$W/out" 2>&1 || fail "launchseq (graphs $graphs): $(tail -n 2 "$W/out")"
    # A library's kernels (CUkernel handles, named so in the graph's nodes).
    shim "$B/tests/launchseq" --library >"$W/lib.out" 2>&1 ||
        fail "launchseq --library (graphs $graphs): $(tail -n 2 "$W/lib.out")"
    # Steps longer than a sequence held whole, alone in a client of their own: their parts.
    LD_PRELOAD="$SHIM" "$B/tests/launchseq" --long >"$W/long.out" 2>&1 &
    long=$!
    wait "$long" || fail "launchseq --long (graphs $graphs): $(tail -n 2 "$W/long.out")"
    wait_for 20 no_clients || fail "the client was not released"
    stop_server 10 || fail "the server did not quit"
    n=$(grep -a "Client process [0-9]*: [0-9]* launch sequences" "$W/log/server.log" |
        grep -v "process $long:" | grep -ao "[0-9]* launch sequences replayed as graphs" |
        awk '{print $1}' | sort -n | head -n 1)
    # The long steps: 60 of 3 parts each, every part a graph from the fourth step on.
    nl=$(grep -a "Client process $long: " "$W/log/server.log" |
        grep -ao "[0-9]* launch sequences replayed as graphs" | awk '{print $1}')
    cut=$(grep -a "Client process $long: " "$W/log/server.log" |
        grep -ao "[0-9]* runs cut into parts" | awk '{print $1}')
    echo "MPSSHIM_LAUNCH_GRAPHS=$graphs (holds sleep: $sleep_hold), long steps: ${nl:-0} parts replayed as graphs, ${cut:-0} runs cut"
    echo "MPSSHIM_LAUNCH_GRAPHS=$graphs (holds sleep: $sleep_hold): ${n:-0} sequences replayed as graphs"
    if [ "$graphs" = 1 ]; then
        [ "${n:-0}" -gt 100 ] ||
            fail "the repeated steps were not replayed as graphs (${n:-0}, the fewer of 2 clients)"
        grep -a "stays launched one by one" "$W/log/server.log" && fail "a sequence's graph was refused"
        [ "${nl:-0}" -ge 30 ] ||
            fail "the long steps' parts were not replayed as graphs (${nl:-0} of about 170)"
    else
        [ -z "$n$nl" ] || fail "sequences replayed with MPSSHIM_LAUNCH_GRAPHS=0"
    fi
done
# The gap rule itself: launches 1 ms apart (fleetc --spread, its host work between them) on a
# server whose rule is 1 us are never held (MPSSHIM_LAUNCH_GRAPH_GAP_US): the sequence is
# held back by the gap rule, and none is replayed.
own_dir "$2/launchseq-gap"
MPSSHIM_LAUNCH_GRAPH_GAP_US=1 "$CTL" -d || exit 1
shim "$B/bench/fleetc" --spread --work-us 8000 --launches 8 --seconds 0.3 >"$W/gap.out" 2>&1 ||
    fail "fleetc --spread: $(tail -n 2 "$W/gap.out")"
stop_server 10 || fail "the server did not quit"
line=$(grep -a "launch sequences replayed as graphs" "$W/log/server.log")
echo "gap rule 1 us, launches 1 ms apart: ${line#*: }" | cut -c 1-200
grep -q "[1-9][0-9]* held back by the gap rule" <<<"$line" || fail "not held back by the gap rule: $line"
grep -q ": 0 launch sequences replayed" <<<"$line" || fail "replayed though held back: $line"
# The same launches while the server is crowded (MPSSHIM_SPIN_CPUS=1: one busy client is
# more than half its CPUs) and coalesces doorbells for up to 10 ms: the client leaves its
# step's launches unrung, the worker finds them together, and the gap rule takes the bound
# as a burst's: the step is replayed as a graph (seqgraph.c, qualify_ns).
own_dir "$2/launchseq-crowded"
MPSSHIM_LAUNCH_GRAPH_GAP_US=1 MPSSHIM_SPIN_CPUS=1 MPSSHIM_COALESCE_US=10000 "$CTL" -d || exit 1
shim "$B/bench/fleetc" --spread --work-us 8000 --launches 8 --seconds 0.5 >"$W/gap.out" 2>&1 ||
    fail "fleetc --spread, crowded: $(tail -n 2 "$W/gap.out")"
stop_server 10 || fail "the server did not quit"
line=$(grep -a "launch sequences replayed as graphs" "$W/log/server.log")
echo "gap rule 1 us, launches 1 ms apart, crowded and coalescing 10 ms: ${line#*: }" | cut -c 1-200
n=$(grep -ao ": [0-9]* launch sequences replayed" <<<"$line" | grep -o "[0-9]*")
[ "${n:-0}" -ge 10 ] || fail "crowded and coalescing, the steps were not replayed as graphs: $line"
[ $rc = 0 ] && echo "PASS repeated launch sequences replayed as graphs, results unchanged"
exit $rc
