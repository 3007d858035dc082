#!/usr/bin/env bash
# A driver call that does not return (on a GPU, one inside the driver's lock stops every
# client): the server's main loop says whose call and which, once it has lasted 10 s, in
# a line naming the server thread, and SIGUSR2 writes every thread's stack into the log,
# one thread after another, each under a header naming its client. The CPU test driver is
# told to take 12 s over an allocation of 1 MiB (MPSSHIM_CPUDRV_SLOW_ALLOC), which
# tests/hold makes first (with the driver's cuMemAlloc, MPSSHIM_DEVICE_VMM=0, not the
# server's arena); the client must still finish.
#   tests/stall_watch.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/stall-watch"
LOG=$MPSSHIM_LOG_DIRECTORY/server.log
MPSSHIM_DEVICE_VMM=0 MPSSHIM_CPUDRV_SLOW_ALLOC=12 "$CTL" -d || exit 1
S=$(server_pid)
env LD_PRELOAD="$SHIM" "$B/tests/hold" 0 >"$W/hold.out" 2>&1 &
P=$!
said() { grep -q "has been going on" "$LOG"; }
if wait_for 15 said; then
    line=$(grep "has been going on" "$LOG")
    echo "${line#*] }"
    echo "$line" | grep -q "Client process $P: its call cuMemAlloc_v2 has been going on for 1[0-9] s in server thread \"client $P\"" ||
        fail "the watch's line does not name the client, the call and its thread: $line"
    kill -USR2 "$S"
    sleep 1
    # Every header is followed by its own frames (none by another header), and the
    # thread serving the client is named.
    awk '/^\[stack / {if (h) bad++; h = 1; n++; next} {h = 0} END {print n + 0, bad + 0}' "$LOG" >"$W/stacks"
    read -r n bad <"$W/stacks"
    echo "$n thread stacks, $bad headers without frames"
    [ "$n" -ge 3 ] && [ "$bad" = 0 ] || fail "the stacks are missing or interleaved ($n, $bad)"
    grep -q "^\[stack Server $S thread [0-9]* client $P\]" "$LOG" ||
        fail "no stack names the thread of client $P"
else
    fail "nothing said of a call 15 s in progress"
fi
wait "$P" || fail "the client failed: $(tail -2 "$W/hold.out")"
[ "$(grep -c "has been going on" "$LOG")" = 1 ] || fail "the slow call was not said exactly once"
stop_server 10 || fail "the server did not quit"
[ $rc = 0 ] && echo "PASS stall watch"
exit $rc
