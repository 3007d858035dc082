#!/usr/bin/env bash
# Clients' registrations at addresses the server's own mappings would take
# (server/core/clientspace.c, interpose/spread.c), on a machine whose address randomisation
# is off for the processes concerned (setarch -R; SKIP where setarch cannot):
#   - a server with MPSSHIM_KEEP_CLIENT_SPACE=1 (the default) says it reserved the clients' range;
#   - tests/shmreg (a /dev/shm file mapped before any CUDA call, registered by two
#     processes), with the clients' own offsets off (MPSSHIM_SPREAD_MAPPINGS=0), passes: its
#     registration lands where, without the reservation, the server's own mapping of a
#     thread lay (said, not asserted: that layout is the test driver's);
#   - two tests/whole_wait clients, identical processes registering 1 MiB of malloc's at
#     once, both pass (MPSSHIM_SPREAD_MAPPINGS, the clients' own offsets); without the
#     offsets, at one address, the second is refused and the first passes (the reservation's
#     MAP_FIXED never replaces another client's registration); with a hole between their
#     libraries at start (tests/progs/holes.c), both pass, the hole filled by the shim;
#   - on the CPU test driver, the programs that use host memory pass through a server with
#     the reservation, with randomisation on (on a GPU the tier runs them);
#   - the server holds nothing of the clients afterwards.
#   tests/clientspace.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
gpu=0
real_driver_if_gpu && gpu=1
setarch -R true 2>/dev/null || {
    echo "SKIP: setarch -R is not allowed here"
    exit 77
}
norand() { setarch -R env LD_PRELOAD="$SHIM" "$@"; }

own_dir "$2/clientspace-off"
MPSSHIM_KEEP_CLIENT_SPACE=0 setarch -R "$CTL" -d || exit 1
MPSSHIM_SPREAD_MAPPINGS=0 norand "$B/tests/shmreg" >"$W/shmreg.out" 2>&1
echo "without the reservation, not randomised: shmreg $(tail -n 1 "$W/shmreg.out");" \
    "$(grep -ao 'refused: the server cannot map.*' "$W/log/server.log" | head -n 1 | cut -c 1-160)"
stop_server 10 || fail "the first server did not quit"

own_dir "$2/clientspace"
MPSSHIM_KEEP_CLIENT_SPACE=1 setarch -R "$CTL" -d || exit 1
grep -aq "The clients' address space is kept free" "$W/log/server.log" ||
    fail "the server did not say it reserved the clients' range: $(grep -a KEEP_CLIENT "$W/log/server.log")"
MPSSHIM_SPREAD_MAPPINGS=0 norand "$B/tests/shmreg" >"$W/shmreg.out" 2>&1 ||
    fail "shmreg, not randomised: $(tail -n 1 "$W/shmreg.out")"
rm -f "$W/go"
pids=()
for call in free unregister; do
    norand "$B/tests/whole_wait" $call "$W/go" >"$W/$call.out" 2>&1 &
    pids+=($!)
done
both_ready() { grep -q ready "$W/free.out" && grep -q ready "$W/unregister.out"; }
wait_for 30 both_ready || fail "whole_wait did not get ready: $(tail -qn 1 "$W/free.out" "$W/unregister.out")"
touch "$W/go"
for i in 0 1; do
    wait "${pids[$i]}" || fail "whole_wait $i, not randomised: $(tail -qn 1 "$W/free.out" "$W/unregister.out")"
done
grep -a "cannot map" "$W/log/server.log" && fail "a registration was refused"
# The same two with a hole between their libraries at start (tests/progs/holes.c), where
# both 1 MiB mallocs would otherwise go, at one address: the shim fills it (spread.c), and
# both pass. Seen on Ubuntu 24.04 without the filling: one refused.
rm -f "$W/go"
for call in free unregister; do
    setarch -R env LD_PRELOAD="$SHIM $B/tests/libholes.so" "$B/tests/whole_wait" $call "$W/go" \
        >"$W/holes-$call.out" 2>&1 &
    pids[$([ $call = free ] && echo 0 || echo 1)]=$!
done
holes_ready() { grep -q ready "$W/holes-free.out" && grep -q ready "$W/holes-unregister.out"; }
wait_for 30 holes_ready || fail "whole_wait with a hole did not get ready: $(tail -qn 1 "$W"/holes-*.out)"
touch "$W/go"
for i in 0 1; do
    wait "${pids[$i]}" || fail "whole_wait $i with a hole: $(grep -h FAIL "$W"/holes-*.out)"
done
[ "$(grep -l '^holes: filled' "$W"/holes-*.out | wc -l)" = 2 ] ||
    fail "the hole between the libraries was left open: $(grep -h '^holes:' "$W"/holes-*.out)"
grep -a "cannot map" "$W/log/server.log" && fail "a registration with a hole was refused"
# The same two without their offsets: one address for both. Inside the reservation the
# server maps with MAP_FIXED, which would replace the first client's pages with the second's;
# the second must be refused instead (its cuMemHostRegister fails, said in the log), and the
# first, holding its registration meanwhile, must pass.
rm -f "$W/go"
for call in free unregister; do
    MPSSHIM_SPREAD_MAPPINGS=0 norand "$B/tests/whole_wait" $call "$W/go" >"$W/same-$call.out" 2>&1 &
    pids[$([ $call = free ] && echo 0 || echo 1)]=$!
done
one_settled() {
    grep -q ready "$W/same-free.out" && grep -q ready "$W/same-unregister.out" && return 0
    grep -q "cuMemHostRegister.*NOT_SUPPORTED" "$W/same-free.out" "$W/same-unregister.out"
}
wait_for 30 one_settled || fail "whole_wait at one address: $(tail -qn 1 "$W"/same-*.out)"
touch "$W/go"
passed=0
for i in 0 1; do wait "${pids[$i]}" && passed=$((passed + 1)); done
refused=$(grep -l "cuMemHostRegister.*NOT_SUPPORTED" "$W"/same-*.out | wc -l)
echo "two clients registering one address: $passed passed, $refused refused"
[ "$passed" = 1 ] && [ "$refused" = 1 ] ||
    fail "one address twice: want one pass and one refusal: $(tail -qn 1 "$W"/same-*.out)"
PROGRAMS_RUN=0
if [ $gpu = 0 ]; then
    PROGRAMS_MATCH='hostreg|shmreg|memcpy_all|managed|managed_vars|ipc|vecadd|graph_host|hostfn|free_order'
    export PROGRAMS_MATCH
    programs_through_server "a server keeping the clients' range" "$W" || rc=1
    unset PROGRAMS_MATCH
fi
wait_for 10 no_clients || fail "clients still listed"
objs=$(server_objects)
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS clientspace: registrations where the server's own mappings were, $PROGRAMS_RUN programs"
exit $rc
