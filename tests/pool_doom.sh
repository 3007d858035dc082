#!/usr/bin/env bash
# Pools destroyed with allocations outstanding (server/memory/pools.c): the server must never pass
# such a destroy to the driver, which on an H100 killed it. The CPU test driver is told to
# die on one (MPSSHIM_CPUDRV_POOL_STRICT=1); natively tests/mempool does exactly that and
# dies. Nor may the server destroy a pool with memory in use, a free not yet run included
# (the H200's driver killed it inside a destroy once in a soak): it keeps pools as spares,
# plain ones made new for the next client, and destroys only spares with nothing in use.
# So the server runs with MPSSHIM_CPUDRV_POOL_STRICT=2, which dies on a destroy of a pool
# with memory in use. Through the shim: the same output as a native run without the setting;
# a client that exits holding memory of a pool it destroyed is released, the pool after it;
# the server still serves, its device memory back.
#   tests/pool_doom.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/pool-doom"
M="$B/tests/mempool"
# The reference, and proof that the setting catches the pattern natively.
timeout 120 env LD_LIBRARY_PATH="$B/cpudrv" "$M" >"$W/native.out" 2>&1 ||
    fail "mempool natively: $(tail -1 "$W/native.out")"
# (In a shell of its own, whose note of the abort goes nowhere.)
if bash -c 'timeout 120 env LD_LIBRARY_PATH="$1/cpudrv" MPSSHIM_CPUDRV_POOL_STRICT=1 "$2"; exit $?' \
    _ "$B" "$M" >"$W/strict.out" 2>&1; then
    fail "natively with MPSSHIM_CPUDRV_POOL_STRICT=1 mempool did not die"
else
    grep "allocations outstanding" "$W/strict.out"
fi
export MPSSHIM_CPUDRV_POOL_STRICT=2
"$CTL" -d || exit 1
mem() { ctl get_server_status | awk '/^Device 0 memory used/ {print $5}'; }
before=$(mem)
timeout 120 env LD_PRELOAD="$SHIM" "$M" >"$W/shim.out" 2>&1
diff -u "$W/native.out" "$W/shim.out" || fail "through the shim the output differs"
timeout 120 env LD_PRELOAD="$SHIM" "$M" --leave-destroyed >"$W/leave.out" 2>&1 ||
    fail "mempool --leave-destroyed: $(tail -1 "$W/leave.out")"
grep -q "exits holding an allocation of a destroyed pool" "$W/leave.out" ||
    fail "mempool --leave-destroyed did not reach its exit"
# Its release must be done (the server logs it) before the next client is judged.
wait_for 10 grep -q "released .*pooled memory" "$W/log/server.log" ||
    fail "no release of the departed client's pooled memory"
timeout 120 env LD_PRELOAD="$SHIM" "$M" >"$W/after.out" 2>&1 ||
    fail "a client after that: $(tail -1 "$W/after.out")"
# Several clients at once, each destroying pools before and after freeing their memory
# (tests/progs/poolrace.c; natively on an H100 its modes 0 and 1 kill the process).
pids=()
for i in 1 2 3 4; do
    timeout 60 env LD_PRELOAD="$SHIM" "$B/tests/poolrace" 9 2 3 >"$W/race$i.out" 2>&1 &
    pids+=($!)
done
for i in 1 2 3 4; do
    wait "${pids[$((i - 1))]}" || fail "poolrace client $i: $(tail -1 "$W/race$i.out")"
done
# More pools at once than the server keeps as spares: the surplus is destroyed, and only
# spares with nothing in use (a destroy of any other kills this server).
timeout 120 env LD_PRELOAD="$SHIM" "$M" --many >"$W/many.out" 2>&1 ||
    fail "mempool --many: $(tail -1 "$W/many.out")"
# The device memory the clients and their pools held is back (a pool with nothing
# reserved costs none here, so this does not see a pool left undestroyed).
mem_back() { [ "$(mem)" = "$before" ]; }
wait_for 10 mem_back || fail "device memory $before -> $(mem) bytes"
pid=$(server_pid)
[ -n "$pid" ] && ! gone "$pid" || fail "the server is gone"
if grep -E "CUmemoryPool.*failed|died" "$W/log/server.log"; then
    fail "the server's log names a failed pool destroy or a death"
fi
ctl quit >/dev/null
# Its last line on pools: spares made new; pools that cuMemFree freed from (poolrace)
# destroyed once settled; idle ones destroyed past the 16 kept; few destroyed at once on
# retiring (past 64 spares none idle: a spare settles when its client's last work has run,
# which a loaded machine delays; once, beside the CI's second lane, 1 of 2907 kept).
wait_for 10 grep -q "CUmemoryPools: " "$W/log/server.log" || fail "no line on pools at exit"
line=$(grep "CUmemoryPools: " "$W/log/server.log" | tail -n 1)
echo "${line#*] }"
re='([0-9]+) spares made new.* ([0-9]+) pools kept as spares.* ([0-9]+) of no use destroyed'
re+='.* ([0-9]+) idle ones destroyed.* ([0-9]+) retiring ones destroyed'
[[ $line =~ $re ]] && [ "${BASH_REMATCH[1]}" -gt 0 ] && [ "${BASH_REMATCH[3]}" -gt 0 ] &&
    [ "${BASH_REMATCH[4]}" -gt 0 ] && [ $((BASH_REMATCH[5] * 100)) -le "${BASH_REMATCH[2]}" ] ||
    fail "spares: none made new, none of no use or idle destroyed, or retiring pools destroyed in more than one of 100 kept"
[ $rc = 0 ] && echo "PASS pool-doom"
exit $rc
