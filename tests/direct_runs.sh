#!/usr/bin/env bash
# Every `both` and `cpu-both` run of tests/progs/programs.txt straight on the CPU test driver
# passes. In the CI tier (MPSSHIM_DIRECT_CACHE set) their outputs are kept (tests/lib.sh,
# direct_run), so the main loop and the scripts that compare the programs through other
# servers with them find them made: the CI tier runs this in a lane of its own, beside the
# main lane's tests, which would otherwise make them there one after another.
#   tests/direct_runs.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
W=$2/direct_runs
mkdir -p "$W"
rc=0 n=0
while IFS='|' read -r cmd mode; do
    [[ $cmd =~ ^[[:space:]]*(#|$) ]] && continue
    [[ $(echo "$mode" | xargs) =~ ^(cpu-)?both$ ]] || continue
    read -r -a argv <<<"$cmd"
    name=$(echo "$cmd" | xargs | tr ' ' '_')
    n=$((n + 1))
    direct_run "$W/$name.direct" "$B/tests/${argv[0]}" "${argv[@]:1}" ||
        { echo "FAIL: $name run directly: $(tail -n 1 "$W/$name.direct")"; rc=1; }
done <"$ROOT/tests/progs/programs.txt"
[ $rc = 0 ] && echo "PASS direct runs: $n programs on the CPU test driver"
exit $rc
