#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz for RUNS inputs each (default 200000), from an
# empty corpus; exits non-zero at the first crash, leak or undefined behaviour (the input
# that caused it is left in the work directory and named in the output).
# Usage: bash tests/fuzz/run.sh BUILD_DIR [RUNS]
set -u
B=$(cd "${1:-build}" && pwd)
RUNS=${2:-200000}
W=$(mktemp -d /tmp/mpsshim-fuzz.XXXXXX)
rc=0
for f in "$B"/fuzz/fuzz_*; do
    name=$(basename "$f")
    mkdir -p "$W/$name"
    # The decoder starts from one valid record per call (seed_records), the image parsers
    # from one well-formed image of each kind (seed_images), the copy planner from nothing.
    [ "$name" = fuzz_records ] && [ -x "$B/fuzz/seed_records" ] &&
        "$B/fuzz/seed_records" "$W/$name" >/dev/null
    [ "$name" = fuzz_images ] && [ -x "$B/fuzz/seed_images" ] &&
        "$B/fuzz/seed_images" "$W/$name" >/dev/null
    if (cd "$W" && "$f" -runs="$RUNS" -max_len=4096 -seed=1 "$W/$name" >"$W/$name.log" 2>&1); then
        echo "$name: $(grep -o 'Done [0-9]* runs.*' "$W/$name.log")"
    else
        echo "$name: FAILED (log $W/$name.log)"
        tail -n 30 "$W/$name.log"
        rc=1
    fi
done
[ $rc = 0 ] && rm -rf "$W"
exit $rc
