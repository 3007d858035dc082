#!/usr/bin/env bash
# Doorbell coalescing (server/core/coalesce.c, MPSSHIM_COALESCE_US): on the CPU test driver, with
# the server made to count itself crowded whenever one client is busy (MPSSHIM_SPIN_CPUS=1),
# so that every busy client may leave its launches unrung:
#   - programs that launch, from several threads, call host functions and poll pass
#     through it, the `both` ones against their direct run;
#   - a client that launches and then only waits for the kernel's write in its own pinned
#     memory, with no call that would ring, sees the write (the sweeper wakes its worker):
#     tests/progs/coalesce_quiet;
#   - the server says it coalesces, and holds nothing of the clients' afterwards.
#   tests/coalesce.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
own_dir "$2/coalesce"
export MPSSHIM_COALESCE_US=200 MPSSHIM_SPIN_CPUS=1
"$CTL" -d || exit 1
export PROGRAMS_MATCH='launch|hostfn|multithread|coalesce_quiet'
programs_through_server "a coalescing server" "$W" || rc=1
unset PROGRAMS_MATCH
grep -q "Doorbell coalescing while crowded" "$W/log/server.log" ||
    fail "the server's log does not say it coalesces"
wait_for 10 no_clients || fail "clients still listed"
objs=$(server_objects)
[ "$objs" = "0 0" ] || fail "the server still holds client objects: $objs"
ctl quit >/dev/null
[ $rc = 0 ] && echo "PASS coalesce: $PROGRAMS_RUN runs through a coalescing server"
exit $rc
