#!/usr/bin/env bash
# What the server maps at addresses of its own choosing lies in its address window
# (server/core/window.c): clients' segments and pinned or managed allocations. A mapping
# made where the kernel likes once sat on the addresses a third client then registered
# (cuMemHostRegister maps the client's pages at the client's own address in the server), and
# that client's call failed because of another client (seen in CI's waitvalue-twin). Here,
# on a server of its own: three tests/hold --all clients (segment, managed memory, the
# rest), the server's maps read; then the clients killed, and their segments must be gone
# from the server's address space once they are released.
#   tests/server_window.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_server "$2/server-window"
pids=()
for i in 1 2 3; do
    env LD_PRELOAD="$SHIM" "$B/tests/hold" 60 --all >"$W/hold$i.out" 2>&1 &
    pids+=($!)
done
all_ready() { for i in 1 2 3; do grep -q ready "$W/hold$i.out" || return 1; done; }
wait_for 30 all_ready || fail "hold did not get ready: $(tail -qn 1 "$W"/hold*.out)"
# The window: 1 TiB from 0x600000000000 (window.c).
lo=$((0x600000000000))
hi=$((lo + (1 << 40)))
outside() { # lines of the server's maps naming $1 that lie outside the window
    grep -a "$1" "/proc/$S/maps" | while IFS='- ' read -r a b _; do
        if (( 16#$a < lo || 16#$b > hi )); then echo "$a-$b"; fi
    done
}
n=$(grep -ac "mpsshim-client" "/proc/$S/maps")
[ "$n" -ge 3 ] || fail "the server maps $n client segments for 3 clients"
grep -aq "mpsshim-pinned" "/proc/$S/maps" || fail "no pinned or managed mapping to look at"
for what in mpsshim-client mpsshim-pinned; do
    o=$(outside "$what")
    [ -z "$o" ] || fail "$what mapped outside the server's window: $o"
done
echo "$n client segments and $(grep -ac mpsshim-pinned "/proc/$S/maps") pinned mappings, all in the window"
kill -9 "${pids[@]}"
wait "${pids[@]}" 2>/dev/null
wait_for 30 no_clients || fail "the killed clients were not released"
n=$(grep -ac "mpsshim-client\|mpsshim-pinned" "/proc/$S/maps")
[ "$n" = 0 ] || fail "$n segment or pinned mappings left after the clients were released"
if ! stop_server 10; then
    fail "the server did not quit"
    kill -9 "$S" 2>/dev/null
fi
[ $rc = 0 ] && echo "PASS the server maps clients' memory only in its window, and lets it go"
exit $rc
