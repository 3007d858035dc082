#!/usr/bin/env bash
# MPSSHIM_GREEN_EACH=1 (server/limits/green.c, an experiment): every unthrottled client's streams in
# a green context of its own. On the CPU test driver: the programs of tests/progs/programs.txt
# that use streams in many ways (below) through a server started so, the `both` ones against
# their direct run; the server made a green context for clients and holds nothing of theirs
# afterwards.
#   tests/green_each.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
W=$2/green_each
mkdir -p "$W"
use_dir "$W"
export MPSSHIM_GREEN_EACH=1
"$CTL" -d || exit 1
rc=0
# The programs whose streams, events, launches, graphs and host functions take the green
# contexts' paths; the rest (memory, copies, modules) run in the shared context either way.
PROGRAMS_MATCH='vecadd|launch|contexts|multithread|streams_events|graphs|graph_host'
export PROGRAMS_MATCH="$PROGRAMS_MATCH|graph_nodes|hostfn|fault|isolation|coalesce_quiet"
programs_through_server "a server with MPSSHIM_GREEN_EACH=1" "$W" || rc=1
unset PROGRAMS_MATCH
wait_for 10 no_clients || { echo "FAIL: clients still listed"; rc=1; }
objs=$(server_objects)
[ "$objs" = "0 0" ] || { echo "FAIL: the server still holds client objects: $objs"; rc=1; }
if grep -q "no green context of its own" "$W/log/server.log"; then
    echo "FAIL: $(grep -m1 'no green context of its own' "$W/log/server.log")"
    rc=1
fi
ctl quit >/dev/null
[ $rc = 0 ] && echo "PASS green_each: $PROGRAMS_RUN runs through a server with MPSSHIM_GREEN_EACH=1"
exit $rc
