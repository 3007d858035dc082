#!/usr/bin/env bash
# Graph memory at addresses of two graphs (server/graphs/graphmem.c, graphmem_register), on the CPU
# test driver told to give it out so (MPSSHIM_CPUDRV_GRAPHMEM_ALIAS=1), as the real driver
# did on an H100 for PyTorch's captures: tests/graph_mem natively and through the shim, on
# a server of its own started with the same setting, must print the same, aliases said.
#   tests/graphmem_alias.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/graphmem-alias"
export MPSSHIM_CPUDRV_GRAPHMEM_ALIAS=1
"$CTL" -d || exit 1
rc=0
timeout 120 env LD_LIBRARY_PATH="$B/cpudrv" "$B/tests/graph_mem" >"$W/native.out" 2>&1 || rc=1
timeout 120 env LD_PRELOAD="$SHIM" "$B/tests/graph_mem" >"$W/shim.out" 2>&1 || rc=1
cat "$W/shim.out"
if ! diff -u "$W/native.out" "$W/shim.out"; then
    echo "FAIL: the outputs differ"
    rc=1
fi
n=$(grep -c "addresses: yes" "$W/native.out")
[ "$n" = 2 ] || { echo "FAIL: the CPU test driver aliased $n of 2 pairs natively"; rc=1; }
ctl quit >/dev/null
grep "graph memory" "$W/log/server.log"
exit $rc
