#!/usr/bin/env bash
# Control commands, logs, the client cap and terminate_client, against servers of its own
# on the CPU test driver (tests/ci.sh runs it: bash tests/control.sh BUILD_DIR).
# Each check prints "ok NAME" or "FAIL NAME: what was seen"; exits 1 if any failed.
# Waits poll for a state with a bound; nothing asserts how long anything took.
set -u
B=$(cd "${1:-build}" && pwd)
W=$(mktemp -d /tmp/mpsshim-control.XXXXXX)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
export MPSSHIM_AUTOSTART=0
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY MPSSHIM_ACTIVE_THREAD_PERCENTAGE \
    MPSSHIM_PINNED_DEVICE_MEM_LIMIT MPSSHIM_CLIENT_PRIORITY MPSSHIM_MAX_CLIENTS
# shellcheck source=tests/checks.sh
. "$(dirname "$0")/checks.sh"
# exits NAME WANT CMD...: CMD's exit status is WANT (its output is not looked at)
exits() {
    local name=$1 want=$2 rc
    shift 2
    "$@" >/dev/null 2>&1
    rc=$?
    if [ "$rc" = "$want" ]; then ok "$name"; else bad "$name" "exit $rc, want $want"; fi
}

LOGRE='^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} '

# ---------------------------------------------------------------- --version, --help, usage
VRE='^[0-9]+\.[0-9]+\.[0-9]+ \(protocol [0-9]+\.[0-9]+(, git [0-9a-f]+(-dirty)?)?\)$'
for prog in mpsshim-server mpsshim-control mpsshim-run; do
    out=$("$B/$prog" --version 2>/dev/null)
    rc=$?
    check "$prog-version-exit" "$rc" 0
    has "$prog-version" "${out#"$prog "}" "$VRE"
    out=$("$B/$prog" --help 2>/dev/null)
    rc=$?
    check "$prog-help-exit" "$rc" 0
    has "$prog-help" "$out" "^usage: $prog "
done
exits mpsshim-server-usage 2 "$B/mpsshim-server" --no-such-option
exits mpsshim-control-usage 2 "$CTL" -x
exits mpsshim-run-usage 2 "$B/mpsshim-run"
check version-same "$("$B/mpsshim-server" --version | cut -d' ' -f2-)" \
    "$("$CTL" --version | cut -d' ' -f2-)"
use_dir "$W/none"
exits no-server-exit 1 ctl get_server_list

# ---------------------------------------------------------------- commands, cap, quit -t
use_dir "$W/capped"
MPSSHIM_MAX_CLIENTS=2 "$CTL" -d || { bad server-start "mpsshim-control -d failed"; exit 1; }
S=$(server_pid)
check get_server_list "$(ctl get_server_list)" "$S"
st=$(ctl get_server_status)
check get_server_status "$(echo "$st" | head -n 3)" "$(printf 'Server %s\nStatus ACTIVE\nClients 0' "$S")"
has get_server_status-memory "$st" '^Device 1 memory used [0-9]+ bytes$'
has get_server_status-arena "$st" \
    '^Device 1 arena [0-9]+ bytes mapped \([0-9]+ in empty slabs kept\), stack [0-9]+ bytes per thread \([0-9]+ at start\)$'
check get_server_status-other "$(ctl 'get_server_status 1')" 'Server 1 not found'
check ps-empty "$(ctl ps)" 'PID ID SERVER DEVICE NAMESPACE COMMAND'
check get_client_list-empty "$(ctl "get_client_list $S")" ''
check get_client_list-usage "$(ctl get_client_list)" 'Usage: get_client_list <server pid>'
check unknown "$(ctl bogus_command)" 'Unknown command "bogus_command"'
check get_default_active_thread_percentage "$(ctl get_default_active_thread_percentage)" 100.0
check set_default_active_thread_percentage "$(ctl 'set_default_active_thread_percentage 50')" 50.0
check get_default_active_thread_percentage-set "$(ctl get_default_active_thread_percentage)" 50.0
has set_default_active_thread_percentage-bad "$(ctl 'set_default_active_thread_percentage 0')" \
    '^Invalid active thread percentage "0"'
check get_active_thread_percentage-default "$(ctl "get_active_thread_percentage $S")" 50.0
check set_active_thread_percentage "$(ctl "set_active_thread_percentage $S 25")" 25.0
check get_active_thread_percentage "$(ctl "get_active_thread_percentage $S")" 25.0
check get_active_thread_percentage-other "$(ctl 'get_active_thread_percentage 1')" 'Server 1 not found'
check get_default_device_pinned_mem_limit-none "$(ctl 'get_default_device_pinned_mem_limit 0')" 0
check set_default_device_pinned_mem_limit "$(ctl 'set_default_device_pinned_mem_limit 0 1G')" ''
check get_default_device_pinned_mem_limit "$(ctl 'get_default_device_pinned_mem_limit 0')" 1G
check set_device_pinned_mem_limit "$(ctl "set_device_pinned_mem_limit $S 1 512M")" ''
check get_device_pinned_mem_limit "$(ctl "get_device_pinned_mem_limit $S 1")" 512M
check get_device_pinned_mem_limit-default "$(ctl "get_device_pinned_mem_limit $S 0")" 1G
has pinned_mem_limit-bad-device "$(ctl 'set_default_device_pinned_mem_limit 7 1G')" '^Invalid device "7"'
has pinned_mem_limit-bad-size "$(ctl 'set_default_device_pinned_mem_limit 0 lots')" '^Invalid memory limit "lots"'
has pinned_mem_limit-beyond-2^64 "$(ctl 'set_default_device_pinned_mem_limit 0 99999999999999999999999')" '^Invalid memory limit "99999999999999999999999"'
check get_default_client_priority "$(ctl get_default_client_priority)" 0
check set_default_client_priority "$(ctl 'set_default_client_priority 1')" ''
check get_default_client_priority-set "$(ctl get_default_client_priority)" 1
has set_default_client_priority-bad "$(ctl 'set_default_client_priority 2')" '^Invalid priority "2"'
# Exit status, stdin not a terminal: 1 when a command failed (every line is still answered).
exits get_server_list-exit 0 ctl get_server_list
exits get_server_status-other-exit 1 ctl 'get_server_status 1'
exits get_client_list-usage-exit 1 ctl get_client_list
exits unknown-exit 1 ctl bogus_command
exits set-bad-exit 1 ctl 'set_default_active_thread_percentage 0'
exits set-bad-device-exit 1 ctl 'set_default_device_pinned_mem_limit 7 1G'
exits set-bad-size-exit 1 ctl 'set_default_device_pinned_mem_limit 0 lots'
exits set_default_client_priority-bad-exit 1 ctl 'set_default_client_priority 2'
exits get_client_info-unknown-exit 1 ctl 'get_client_info 1'
exits quit-usage-exit 1 ctl 'quit -t soon'
exits set-good-exit 0 ctl 'set_default_client_priority 0' get_default_client_priority
out=$(ctl bogus_command get_server_list)
rc=$?
check failed-then-served "$out" "$(printf 'Unknown command "bogus_command"\n%s' "$S")"
check failed-then-served-exit "$rc" 1
# Back to no operator limits, so that the clients' own limits are what shows below.
ctl "set_default_active_thread_percentage 100" "set_active_thread_percentage $S 100" \
    "set_default_device_pinned_mem_limit 0 0" "set_device_pinned_mem_limit $S 1 0" \
    "set_default_client_priority 0" >/dev/null

# A client with limits of its own, and a busy one: the server's two places.
spawn H "$W/hold.log" MPSSHIM_ACTIVE_THREAD_PERCENTAGE=25 MPSSHIM_PINNED_DEVICE_MEM_LIMIT=0=64M \
    MPSSHIM_CLIENT_PRIORITY=1 "$B/tests/hold" 600
spawn V "$W/busy.log" "$B/tests/smallkern" 100000000
until_true grep -q ready "$W/hold.log" || bad hold-ready "$(cat "$W/hold.log")"
until_true grep -q 'ok setup' "$W/busy.log" || bad busy-ready "$(cat "$W/busy.log")"
check get_client_list "$(ctl "get_client_list $S" | sort -n)" "$(printf '%s\n' "$H" "$V" | sort -n)"
dl=$(ctl get_device_client_list)
# Devices by UUID, as MPS prints them: each client on both devices.
uuid_re='GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}'
has get_device_client_list-0 "$dl" "^$uuid_re $H\$"
has get_device_client_list-1 "$dl" "^$uuid_re $V\$"
check get_device_client_list-devices "$(echo "$dl" | awk '{print $1}' | sort -u | wc -l)" 2
check get_device_client_list-own "$(ctl "get_device_client_list $S")" "$dl"
ps=$(ctl ps)
has ps-hold "$ps" "^$H [0-9]+ $S GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4} [0-9]+ $B/tests/hold 600\$"
has ps-busy "$ps" "^$V [0-9]+ $S GPU-[0-9a-f-]+ [0-9]+ $B/tests/smallkern 100000000\$"
check ps-p "$(ctl "ps -p $S")" "$ps"
info=$(ctl "get_client_info $H")
echo "$info"
# 25% of the CPU test device's 132 SMs, at the partition granularity: 32 (as MPS says).
has client_info-device0 "$info" '^  Device 0: memory used 1048576 bytes, memory limit 64M, 32 of 132 SMs$'
has client_info-device1 "$info" '^  Device 1: memory used 0 bytes, memory limit none, 32 of 132 SMs$'
has client_info-pct "$info" '^  Active thread percentage 25$'
has client_info-priority "$info" '^  Priority 1 \(below normal\)$'
has client_info-streams "$info" '^  Streams [0-9]+$'
has client_info-launches "$info" '^  Kernels launched 0$'
has client_info-copies "$info" '^  Bytes copied [0-9]+$'
has client_info-requests "$info" '^  Requests served [1-9][0-9]*$'
has client_info-busy "$(ctl get_client_info)" '^  Kernels launched [1-9][0-9]*$'
# The busy client synchronises every 100 launches: the GPU posts those replies (waits.c).
# Looked at until they come (30 s): CI once saw all of the first 18 answered by the worker,
# when replies from the GPU were off while the server was crowded (spin.c).
gpu_replies() { ctl "get_client_info $V" | grep -Eq '^  Replies from the GPU [1-9][0-9]*$'; }
if until_true gpu_replies; then
    ok client_info-gpu-replies
else
    bad client_info-gpu-replies "$(ctl "get_client_info $V")"
fi
check client_info-unknown "$(ctl 'get_client_info 1')" 'Client 1 not found'

# The third client is refused: an error from its first call, never the real driver.
out=$(shim "$B/tests/vecadd" 1000 2>&1)
rc=$?
echo "$out"
[ "$rc" != 0 ] && ok third-client-fails || bad third-client-fails "exit 0"
has third-client-error "$out" 'CUDA_ERROR_MPS_MAX_CLIENTS_REACHED'
has third-client-message "$out" '^mpsshim: server refused this client: .*MPSSHIM_MAX_CLIENTS=2'
printf '%s\n' "$out" | grep -q 'running directly' && bad third-client-no-fallback "$out" ||
    ok third-client-no-fallback
has refusal-logged "$(cat "$MPSSHIM_LOG_DIRECTORY/server.log")" "Refused a client: client process [0-9]+: the server already has 2 clients"

# Malformed limits: refused with the server's message, no fallback either.
ctl "terminate_client $S $V" >/dev/null
wait "$V" 2>/dev/null
# A client of the stream-ordered allocator gets every reply from its worker: the driver
# counts its pools' frees done only once a thread of the server has seen them (waits.c).
spawn P "$W/pool.log" "$B/tests/smallkern" 100000000 --pool
until_true grep -q 'ok setup' "$W/pool.log" || bad pool-ready "$(cat "$W/pool.log")"
pool_busy() { ctl "get_client_info $P" | grep -q '^  Kernels launched [1-9]'; }
until_true pool_busy || bad pool-busy "$(ctl "get_client_info $P")"
info=$(ctl "get_client_info $P")
has client_info-pool-busy "$info" '^  Requests served [1-9][0-9]*$'
has client_info-pool-no-gpu-replies "$info" '^  Replies from the GPU 0$'
ctl "terminate_client $S $P" >/dev/null
wait "$P" 2>/dev/null
# A context's synchronisation whose work is on one stream is answered by the GPU as that
# stream's synchronisation is (waits.c one_stream_ctx), not by a block in the driver nor by the
# worker.
spawn K "$W/ctxsync.log" "$B/tests/smallkern" 100000000 --ctx
until_true grep -q 'ok setup' "$W/ctxsync.log" || bad ctxsync-ready "$(cat "$W/ctxsync.log")"
k_gpu_replies() { ctl "get_client_info $K" | grep -Eq '^  Replies from the GPU [1-9][0-9]*$'; }
until_true k_gpu_replies && ok client_info-ctx-gpu-replies ||
    bad client_info-ctx-gpu-replies "$(ctl "get_client_info $K")"
ctl "terminate_client $S $K" >/dev/null
wait "$K" 2>/dev/null
out=$(MPSSHIM_ACTIVE_THREAD_PERCENTAGE=250 shim "$B/tests/vecadd" 1000 2>&1)
echo "$out"
has bad-limits-message "$out" '^mpsshim: server refused this client: .*ACTIVE_THREAD_PERCENTAGE=250'
has bad-limits-error "$out" 'CUDA_ERROR_MPS_CONNECTION_FAILED'
printf '%s\n' "$out" | grep -q 'running directly' && bad bad-limits-no-fallback "$out" ||
    ok bad-limits-no-fallback

# quit -t: the idle client does not finish in time; the server quits anyway.
ctl "quit -t 1" >/dev/null
until_true gone "$S" && ok quit-t || bad quit-t "server $S still running"
has quit-t-logged "$(cat "$MPSSHIM_LOG_DIRECTORY/control.log")" \
    'Quit: 1 client\(s\) still connected after 1 s; shutting down anyway'
has server-exit-logged "$(cat "$MPSSHIM_LOG_DIRECTORY/control.log")" "Server $S exited with status 0"
kill "$H" 2>/dev/null

# Both logs: every line in MPS's format, the right name in each.
sl=$(cat "$MPSSHIM_LOG_DIRECTORY/server.log")
cl=$(cat "$MPSSHIM_LOG_DIRECTORY/control.log")
bad_lines=$(printf '%s\n' "$sl" | grep -Ev "${LOGRE}Server [0-9]+\] ")
check server-log-format "$bad_lines" ''
bad_lines=$(printf '%s\n' "$cl" | grep -Ev "${LOGRE}Control [0-9]+\] ")
check control-log-format "$bad_lines" ''
has control-log-start "$cl" "Control $S\] Starting new server $S for user $(id -u)\$"
has control-log-ready "$cl" "Control $S\] NEW SERVER $S: Ready\$"
has control-log-command "$cl" "Command: set_active_thread_percentage $S 25 -> 25.0\$"
has control-log-terminate "$cl" "Command: terminate_client $S $V -> 0\$"
has server-log-limits "$sl" "Client process $H limits: active thread percentage 25 \(32 SMs on device 0, 32 SMs on device 1\), device memory limit 64M on device 0, priority below normal"

# ---------------------------------------------------------------- word waits before the quiet context
# A client's stream synchronisations before the quiet context is made (its segment is not
# registered till then: server/core/segment.c; the CPU test driver makes it in 5 s here) are
# answered by its worker once the stream has stored a word of the server's; after, by the GPU.
use_dir "$W/cold"
MPSSHIM_CPUDRV_CTX_DELAY_MS=5000 "$CTL" -d || { bad cold-server-start "mpsshim-control -d failed"; exit 1; }
S=$(server_pid)
spawn K "$W/cold-busy.log" "$B/tests/smallkern" 100000000
until_true grep -q 'ok setup' "$W/cold-busy.log" || bad cold-busy-ready "$(cat "$W/cold-busy.log")"
word_replies() { ctl "get_client_info $1" | grep -Eq '^  Replies after a word from the GPU [1-9][0-9]*$'; }
until_true word_replies "$K" && ok cold-word-replies || bad cold-word-replies "$(ctl "get_client_info $K")"
until_true k_gpu_replies && ok cold-then-gpu-replies || bad cold-then-gpu-replies "$(ctl "get_client_info $K")"
ctl "terminate_client $S $K" >/dev/null
wait "$K" 2>/dev/null
ctl quit >/dev/null
until_true gone "$S" || bad cold-server-quit "server $S still running"

# ---------------------------------------------------------------- terminate_client
use_dir "$W/term"
"$CTL" -d || { bad server-start "mpsshim-control -d failed"; exit 1; }
S=$(server_pid)
BASE=$(mem_used)
spawn V "$W/victim.log" "$B/tests/smallkern" 100000000
until_true grep -q 'ok setup' "$W/victim.log" || bad victim-ready "$(cat "$W/victim.log")"
# The victim holds objects (its module, stream, memory): the server counts them.
objects() { ctl get_server_status | awk '/^Objects/ {print $2 " " $3}'; }
[ "$(objects | cut -d' ' -f1)" -gt 0 ] 2>/dev/null && ok objects-held || bad objects-held "$(objects)"
spawn Y "$W/bystander.log" "$B/tests/smallkern" 2000000
spawn Y2 "$W/bystander2.log" "$B/tests/vecadd" 2000003
check terminate_client "$(ctl "terminate_client $S $V")" 0
wait "$V"
rc=$?
cat "$W/victim.log"
[ "$rc" != 0 ] && ok victim-fails || bad victim-fails "exit 0"
has victim-error "$(cat "$W/victim.log")" 'CUDA_ERROR_MPS_CLIENT_TERMINATED'
wait "$Y" && ok bystander-smallkern || bad bystander-smallkern "$(tail -n 3 "$W/bystander.log")"
wait "$Y2" && ok bystander-vecadd || bad bystander-vecadd "$(tail -n 3 "$W/bystander2.log")"
check terminate_client-again "$(ctl "terminate_client $S $V")" "Client $V not found"
exits terminate_client-again-exit 1 ctl "terminate_client $S $V"
check terminate_client-other-server "$(ctl "terminate_client 1 $V")" 'Server 1 not found'
until_true no_clients && ok clients-gone || bad clients-gone "$(ctl get_server_status)"
check memory-back "$(mem_used)" "$BASE"
check objects-back "$(objects)" "0 (0"
sl=$(cat "$MPSSHIM_LOG_DIRECTORY/server.log")
has terminate-logged "$sl" "Server $S\] Client process $V terminated \(terminate_client\)"
has terminate-released "$sl" "Client process $V: released [0-9]+ objects?"
printf '%s\n' "$sl" | grep -q 'tables not empty' && bad tables-empty "$sl" || ok tables-empty
has terminate-control-log "$(cat "$MPSSHIM_LOG_DIRECTORY/control.log")" "Terminating client $V\$"
stop_server 30 && ok quit || bad quit "server still running"

# ---------------------------------------------------------------- a start right after quit
# A quitting server releases its contexts (0.7 s with two H200s; here 0.5 s a device,
# MPSSHIM_CPUDRV_RELEASE_DELAY_MS) and `quit` returns once it has exited and its lock is free.
# On a GPU the lock was still held for moments after the pid looked gone (its descriptors
# still closing): a process that holds the lock with the server's socket gone (flock(1), 1.5
# s) stands for that. `-d` must wait for it and start, not say that a server runs; while one
# serves, -d still refuses at once.
use_dir "$W/restart"
MPSSHIM_CPUDRV_RELEASE_DELAY_MS=500 "$CTL" -d || bad restart-first "mpsshim-control -d failed"
S=$(server_pid)
ctl quit >/dev/null
flock -x "$MPSSHIM_PIPE_DIRECTORY/server.lock" sleep 1.5 &
holder=$!
until_true pgrep -P "$holder" -x sleep >/dev/null || bad restart-holder "flock did not take the lock"
if "$CTL" -d 2>"$W/restart.err"; then ok restart-after-quit; else bad restart-after-quit "$(cat "$W/restart.err")"; fi
wait "$holder"
S2=$(server_pid)
[ -n "$S2" ] && [ "$S2" != "$S" ] && ok restart-new-pid || bad restart-new-pid "pid $S2 (was $S)"
has restart-serves "$(shim "$B/tests/vecadd" 1000 2>&1)" '^PASS vecadd'
exits restart-refused-while-serving 1 "$CTL" -d
stop_server 30 && ok restart-quit || bad restart-quit "server still running"

# (A crowd of control connections, idle ones timed out, hostile names: control_hostile.sh.)

# ---------------------------------------------------------------- logs that cannot be written
# A log directory that cannot exist (its parent is a regular file). -d refuses to start, and
# says why: a daemon's logs are all there is to read later. -f serves with a warning: its
# log lines still reach stderr, where whoever runs it in the foreground collects them.
export MPSSHIM_PIPE_DIRECTORY=$W/nolog/pipe
: >"$W/afile"
export MPSSHIM_LOG_DIRECTORY=$W/afile/log
out=$("$CTL" -d 2>&1)
check unwritable-dir-d-exit "$?" 1
has unwritable-dir-d-message "$out" '^mpsshim server did not start: cannot open the log .*/afile/log/server\.log'
exits unwritable-dir-d-no-server 1 ctl get_server_list
"$CTL" -f 2>"$W/nolog.err" &
F=$!
PIDS+=("$F")
until_true test -S "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" && ok unwritable-dir-f-start ||
    bad unwritable-dir-f-start "$(cat "$W/nolog.err")"
out=$(shim "$B/tests/vecadd" 1000 2>&1)
has unwritable-dir-f-serves "$out" '^PASS vecadd'
printf '%s\n' "$out" | grep -q 'running directly' && bad unwritable-dir-f-served-by-server "$out" ||
    ok unwritable-dir-f-served-by-server
check unwritable-dir-f-commands "$(ctl get_server_list)" "$F"
stop_server 30 && ok unwritable-dir-f-quit || bad unwritable-dir-f-quit "server still running"
err=$(cat "$W/nolog.err")
has unwritable-dir-f-warning "$err" '^mpsshim: cannot open log .*/afile/log/server\.log .*continuing without it'
has unwritable-dir-f-lines-on-stderr "$err" "${LOGRE}Server $F\] New client [0-9]+ connected"

# -f in a writable directory: every line goes to the log files and to stderr alike.
use_dir "$W/fg"
"$CTL" -f 2>"$W/fg.err" &
F=$!
PIDS+=("$F")
until_true test -S "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" || bad fg-start "$(cat "$W/fg.err")"
shim "$B/tests/vecadd" 1000 >/dev/null 2>&1
ctl get_server_list >/dev/null
stop_server 30 || bad fg-quit "server still running"
check fg-stderr-has-server-log "$(grep " Server $F\] " "$W/fg.err")" "$(cat "$MPSSHIM_LOG_DIRECTORY/server.log")"
check fg-stderr-has-control-log "$(grep " Control $F\] " "$W/fg.err")" \
    "$(cat "$MPSSHIM_LOG_DIRECTORY/control.log")"

# SIGHUP reopens the logs (log rotation): the moved files keep what they had, new ones
# appear with what follows, and the server serves on.
use_dir "$W/rotate"
"$CTL" -d || bad rotate-start "mpsshim-control -d failed"
S=$(server_pid)
L=$MPSSHIM_LOG_DIRECTORY
mv "$L/server.log" "$L/server.log.1"
mv "$L/control.log" "$L/control.log.1"
kill -HUP "$S"
until_true test -s "$L/server.log" && ok sighup-new-server-log || bad sighup-new-server-log "no new $L/server.log"
out=$(shim "$B/tests/vecadd" 1000 2>&1)
has sighup-serves "$out" '^PASS vecadd'
check sighup-commands "$(ctl get_server_list)" "$S"
has sighup-new-lines "$(cat "$L/server.log")" "${LOGRE}Server $S\] New client [0-9]+ connected"
has sighup-new-control-lines "$(cat "$L/control.log")" "Command: get_server_list -> $S\$"
has sighup-old-kept "$(cat "$L/server.log.1")" "Server ready"
grep -q 'New client' "$L/server.log.1" && bad sighup-old-untouched "$(cat "$L/server.log.1")" ||
    ok sighup-old-untouched

# quit returns once the server has exited: a new one starts right after, in the same
# directory (exit 0 both).
exits quit-exit 0 ctl quit
"$CTL" -d && ok quit-then-d || bad quit-then-d "mpsshim-control -d right after quit failed"
S2=$(server_pid)
[ -n "$S2" ] && [ "$S2" != "$S" ] && ok quit-then-d-new-server || bad quit-then-d-new-server "[$S2] after [$S]"
# Exited: gone, or a zombie until its parent (init, after -d) reaps it.
state=$(sed 's/.*) //' "/proc/$S/stat" 2>/dev/null | cut -c1)
[ -z "$state" ] || [ "$state" = Z ] && ok quit-old-exited || bad quit-old-exited "server $S in state $state"
stop_server 30 || bad quit-then-d-quit "server still running"

# A full disk: both logs are character devices like /dev/full (every write fails with
# ENOSPC; logs are opened without following links, so a link to /dev/full cannot stand in).
# The server serves its clients itself (not the driver's fallback), and says so once per log.
# Making device nodes needs root: skipped otherwise.
use_dir "$W/full"
mkdir -p "$MPSSHIM_LOG_DIRECTORY"
if mknod "$MPSSHIM_LOG_DIRECTORY/server.log" c 1 7 2>/dev/null &&
    mknod "$MPSSHIM_LOG_DIRECTORY/control.log" c 1 7 2>/dev/null; then
"$CTL" -f > >(cat >"$W/full.out") 2> >(cat >"$W/full.err") &
F=$!
PIDS+=("$F")
until_true test -S "$MPSSHIM_PIPE_DIRECTORY/mpsshim.sock" && ok full-disk-start ||
    bad full-disk-start "$(cat "$W/full.err")"
for i in 1 2; do
    out=$(shim "$B/tests/vecadd" 1000 2>&1)
    has full-disk-serves-$i "$out" '^PASS vecadd'
    printf '%s\n' "$out" | grep -q "running directly" &&
        bad full-disk-served-by-server-$i "the client ran on the driver: $out"
done
check full-disk-commands "$(ctl get_server_list get_default_client_priority)" "$(printf '%s\n0' "$F")"
stop_server 30 && ok full-disk-quit || bad full-disk-quit "server still running"
cat "$W/full.err"
check full-disk-said-once-server "$(grep -c 'cannot write the log .*/server.log' "$W/full.err")" 1
check full-disk-said-once-control "$(grep -c 'cannot write the log .*/control.log' "$W/full.err")" 1
else
    echo "skip full-disk: making device nodes needs root"
fi

[ "$FAILED" = 0 ] && echo "control: all passed" || echo "control: FAILED (files in $W)"
exit "$FAILED"
