#!/usr/bin/env bash
# cuMemAlloc served from the server's pool (MPSSHIM_DEVICE_POOL=1, server/devmem.c), on the
# CPU test driver: every program of tests/progs/programs.txt through a server started so,
# the `both` ones against their direct run, exactly as the CI tier runs them on the default
# server; then the server's device memory back where it was.
#   tests/devpool.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
W=$2/devpool
mkdir -p "$W"
use_dir "$W"
export MPSSHIM_DEVICE_POOL=1
"$CTL" -d || exit 1
mem() { ctl get_server_status | awk '/^Device 0 memory used/ {print $5}'; }
before=$(mem)
rc=0 n=0
while IFS='|' read -r cmd mode; do
    [[ $cmd =~ ^[[:space:]]*(#|$) ]] && continue
    read -r -a argv <<<"$cmd"
    mode=$(echo "$mode" | xargs)
    name=$(echo "$cmd" | xargs | tr ' ' '_')
    prog=$B/tests/${argv[0]}
    n=$((n + 1))
    if ! timeout 150 env LD_PRELOAD="$SHIM" "$prog" "${argv[@]:1}" >"$W/$name.shim" 2>&1; then
        echo "FAIL: $name through the pool server: $(tail -n 1 "$W/$name.shim")"
        rc=1
        continue
    fi
    [ "$mode" = both ] || continue
    timeout 300 env LD_LIBRARY_PATH="$B/cpudrv" "$prog" "${argv[@]:1}" >"$W/$name.direct" 2>&1
    if ! diff -q "$W/$name.direct" "$W/$name.shim" >/dev/null; then
        echo "FAIL: $name: the output differs from its direct run"
        diff "$W/$name.direct" "$W/$name.shim" | head -n 6
        rc=1
    fi
done <"$ROOT/tests/progs/programs.txt"
# The last frees run in stream order after their clients left: given a moment.
mem_back() { [ "$(mem)" = "$before" ]; }
wait_for 10 mem_back || { echo "FAIL: device memory $before -> $(mem) bytes"; rc=1; }
if grep "releasing device memory failed" "$W/log/server.log"; then rc=1; fi
ctl quit >/dev/null
[ $rc = 0 ] && echo "PASS devpool: $n runs through a server with MPSSHIM_DEVICE_POOL=1"
exit $rc
