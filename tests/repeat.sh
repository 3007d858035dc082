#!/usr/bin/env bash
# Flake hunting: runs the programs of tests/progs/programs.txt and tests/cudart/programs.txt
# through the shim, over and over, on one server of the CPU test driver, JOBS at a time (so
# that the machine is loaded), for SECONDS; then prints each program's runs and failures,
# and keeps every failed run's output in the work directory. Not part of the CI tier: a
# failure once in a few hundred runs is what it is for (two were found this way: a stale
# function layout after a library unload, and a freed range still in the mirror when
# another thread was given the address).
#
#   bash tests/repeat.sh BUILD_DIR [SECONDS] [JOBS] [REGEX]   (defaults 300 s, 3 jobs, all)
# REGEX keeps the program lines that match it (e.g. 'ptds|modules').
set -u
B=$(cd "${1:-build}" && pwd) || exit 2
SECS=${2:-300} JOBS=${3:-3} PICK=${4:-.}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/mpsshim-repeat.XXXXXX)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
use_dir "$WORK"
trap 'ctl quit >/dev/null 2>&1' EXIT

# Program lines: "DIR ARGS..." for those the shim runs in CI (not the GPU-only ones).
lines=()
while IFS='|' read -r cmd mode; do
    [[ $cmd =~ ^[[:space:]]*(#|$) ]] && continue
    mode=$(echo "$mode" | xargs)
    [ "$mode" = gpu-both ] && continue
    cmd=$(echo "$cmd" | xargs)
    # A fault takes the shared context down for every client of the server (by design):
    # beside other jobs it would fail them.
    [ "$JOBS" -gt 1 ] && [[ $cmd =~ ^fault ]] && continue
    [[ $cmd =~ $PICK ]] && lines+=("tests/$cmd")
done <"$ROOT/tests/progs/programs.txt"
while IFS='|' read -r cmd _; do
    [[ $cmd =~ ^[[:space:]]*(#|$) ]] && continue
    cmd=$(echo "$cmd" | xargs)
    [[ $cmd =~ $PICK ]] && lines+=("tests/cudart/$cmd")
done <"$ROOT/tests/cudart/programs.txt"
[ ${#lines[@]} -gt 0 ] || { echo "no program matches '$PICK'"; exit 2; }
"$CTL" -d || { echo "the server did not start"; exit 1; }

# One job: the lines in turn until the time is up; "RESULT<TAB>LINE" per run.
job() {
    local j=$1 end=$((SECONDS + SECS)) n=0 l rc
    while [ $SECONDS -lt $end ]; do
        for l in "${lines[@]}"; do
            n=$((n + 1))
            read -r -a argv <<<"$l"
            timeout -k 5 120 env LD_PRELOAD="$SHIM" "$B/${argv[0]}" "${argv[@]:1}" \
                >"$WORK/job$j.out" 2>&1 </dev/null
            rc=$?
            if [ $rc = 0 ]; then
                printf 'ok\t%s\n' "$l"
            else
                printf 'FAIL(%s)\t%s\n' "$rc" "$l"
                cp "$WORK/job$j.out" "$WORK/fail-$j-$n.out"
            fi
            [ $SECONDS -lt $end ] || break
        done
    done >"$WORK/job$j.tsv"
}

echo "repeating ${#lines[@]} program lines, $JOBS at a time, for $SECS s (work: $WORK)"
for j in $(seq "$JOBS"); do job "$j" & done
wait
cat "$WORK"/job*.tsv | awk -F'\t' '
    { runs[$2]++; if ($1 != "ok") { bad[$2]++; how[$2] = how[$2] " " $1 } }
    END { for (l in runs) printf "%6d runs %4d failed  %s%s\n", runs[l], bad[l], l, how[l] }' |
    sort -k3,3nr -k5
fails=$(cat "$WORK"/job*.tsv | grep -vc '^ok')
echo "$fails failed runs; their outputs: $WORK/fail-*.out"
[ "$fails" = 0 ]
