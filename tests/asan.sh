#!/usr/bin/env bash
# The protocol and unit tests once more under AddressSanitizer and UBSan (CI runs this as
# asan-protocol): the server, the unit tests and the raw client built with sanitizers in
# BUILD-asan; ordinary clients (the shim, the test programs) from BUILD speak to the
# sanitized server. Fails on any sanitizer report or a server that does not exit cleanly.
# Usage: bash tests/asan.sh BUILD_DIR
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
A=$B-asan
export CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
export LDFLAGS="-fsanitize=address,undefined"
mkdir -p "$A"
make -C "$ROOT" --no-print-directory B="$A" -j"$(nproc)" "$A/mpsshim-server" "$A/mpsshim-control" \
    "$A/tests/unit/channel_test" "$A/tests/unit/ranges_test" "$A/tests/unit/rawclient" \
    >"$A/make.log" 2>&1 || { tail -n 20 "$A/make.log"; exit 1; }
unset CFLAGS LDFLAGS
# Leak reports at exit would name the driver's and libffi's one-time allocations: off.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
W=$(mktemp -d /tmp/mpsshim-asan.XXXXXX)
rc=0
step() { # step NAME CMD...: runs CMD, notes its failure
    if "${@:2}" >"$W/$1.log" 2>&1; then echo "ok $1"; else echo "FAIL $1"; tail -n 5 "$W/$1.log"; rc=1; fi
}
step channel_test "$A/tests/unit/channel_test"
step ranges_test "$A/tests/unit/ranges_test"
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log MPSSHIM_AUTOSTART=0 MPSSHIM_CPUDRV_DEVICES=2 \
    MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1 MPSSHIM_TEST_KERNELS=$B/tests
mkdir -p "$W/pipe" && chmod 700 "$W/pipe"
"$A/mpsshim-server" 2>"$W/server.err" &
srv=$!
for _ in $(seq 100); do [ -S "$W/pipe/mpsshim.sock" ] && break; sleep 0.1; done
step raw-garbage "$A/tests/unit/rawclient" garbage
step raw-hostile "$A/tests/unit/rawclient" hostile
step raw-scribble "$A/tests/unit/rawclient" scribble
step raw-fuzz "$A/tests/unit/rawclient" fuzz 7 20000
# Not hostreg: ASan's shadow memory takes much of this server's address space, so the
# client's addresses are often refused there (as designed: the server maps them at the same
# addresses or refuses).
for p in "vecadd 100000" "memcpy_all --quick" isolation isolation2 "ipc --shim" graph_host \
    "graph_host --leave-capturing" graphs \
    vmm_ipc capture_alloc idle_answers "idle_answers --ipc" managed_vars tensormap "tensormap --shim" \
    peer copybatch managed_migrate "managed --acc"; do
    read -r -a argv <<<"$p"
    step "prog-${p// /_}" env LD_PRELOAD="$B/libmpsshim.so" "$B/tests/${argv[0]}" "${argv[@]:1}"
done
printf "quit\n" | "$A/mpsshim-control" >/dev/null
wait $srv
src=$?
if [ $src != 0 ] || grep -q "AddressSanitizer\|runtime error\|LeakSanitizer" "$W/server.err"; then
    echo "FAIL server (exit $src)"
    head -n 40 "$W/server.err"
    rc=1
else
    echo "ok server exited cleanly, no sanitizer report"
fi
[ $rc = 0 ] && rm -rf "$W"
exit $rc
