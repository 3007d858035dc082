#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz for RUNS inputs each (default 200000), from an
# empty corpus; exits non-zero at the first crash, leak or undefined behaviour (the input
# that caused it is left in the work directory and named in the output).
# fuzz_server (the server's own operations in the fuzzer's process) is far slower per input
# than the parsers: FUZZ_SERVER_RUNS sets its count apart (default RUNS), and
# FUZZ_SERVER_SECONDS a bound on its time (default none), which CI's short run sets.
# Inputs a run found once (tests/fuzz/found/TARGET/, named for what they broke) are read
# first, as a second corpus, so that what they broke stays mended.
# Usage: bash tests/fuzz/run.sh BUILD_DIR [RUNS]
set -u
B=$(cd "${1:-build}" && pwd)
FOUND=$(cd "$(dirname "$0")" && pwd)/found
RUNS=${2:-200000}
W=$(mktemp -d /tmp/mpsshim-fuzz.XXXXXX)
rc=0
for f in "$B"/fuzz/fuzz_*; do
    name=$(basename "$f")
    mkdir -p "$W/$name"
    # The decoder starts from one valid record per call (seed_records), the image parsers
    # from one well-formed image of each kind (seed_images), the copy planner and the
    # server's operations from nothing.
    [ "$name" = fuzz_records ] && [ -x "$B/fuzz/seed_records" ] &&
        "$B/fuzz/seed_records" "$W/$name" >/dev/null
    [ "$name" = fuzz_images ] && [ -x "$B/fuzz/seed_images" ] &&
        "$B/fuzz/seed_images" "$W/$name" >/dev/null
    runs=$RUNS
    extra=()
    if [ "$name" = fuzz_server ]; then
        runs=${FUZZ_SERVER_RUNS:-$RUNS}
        # Inputs are sequences of records: long ones from the start (not grown slowly), and
        # a record that waits 30 s for nothing is a finding.
        extra=(-len_control=0 -timeout=30)
        [ -n "${FUZZ_SERVER_SECONDS:-}" ] && extra+=(-max_total_time="$FUZZ_SERVER_SECONDS")
    fi
    start=$(date +%s)
    corpora=("$W/$name")
    [ -d "$FOUND/$name" ] && corpora+=("$FOUND/$name")
    if (cd "$W" && "$f" -runs="$runs" -max_len=4096 -seed=1 "${extra[@]}" "${corpora[@]}" \
        >"$W/$name.log" 2>&1); then
        echo "$name: $(grep -o 'Done [0-9]* runs.*' "$W/$name.log") ($(( $(date +%s) - start )) s)"
    else
        echo "$name: FAILED (log $W/$name.log)"
        tail -n 30 "$W/$name.log"
        rc=1
    fi
done
[ $rc = 0 ] && rm -rf "$W"
exit $rc
