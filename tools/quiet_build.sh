#!/usr/bin/env bash
# tools/quiet_build.sh LOG WHAT MAKE-COMMAND...: runs the build with its output in LOG, saying
# what it builds first and, every 10 s, how far it got (commands run so far), so that a long
# quiet build does not look hung; on failure the end of LOG and its path. The Makefile's
# quiet_build calls it (`make V=1` runs the build plainly instead).
set -u
log=$1 what=$2
shift 2
mkdir -p "$(dirname "$log")"
echo "building $what (log: $log; V=1 shows it)"
"$@" >"$log" 2>&1 &
pid=$!
t0=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 20); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -0 "$pid" 2>/dev/null &&
        echo "  ... $(grep -c '^\(cc\|gcc\|clang\|/usr/local/cuda/bin/nvcc\|nvcc\|python3\|ar\) ' "$log") commands run, $((SECONDS - t0)) s"
done
if ! wait "$pid"; then
    tail -n 30 "$log"
    echo "the build failed: $log"
    exit 1
fi
echo "built in $((SECONDS - t0)) s"
