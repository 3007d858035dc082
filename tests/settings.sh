#!/usr/bin/env bash
# Every setting of the table (channel/settings.def, as `mpsshim-server --settings` prints it,
# so that this never falls out of step) fed a bad value, under MPS's name where it has one:
# the server's are said in server.log, naming the variable as set, and the server starts and
# serves with its defaults (get_server_status says so); a client's are said on its stderr
# and it runs, but for its own limits, which refuse it, as MPS does. Then good values are
# taken as meant.
#   tests/settings.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_dir "$2/settings"
LOG=$W/log/server.log
table=$("$B/mpsshim-server" --settings) || { echo "FAIL: mpsshim-server --settings"; exit 1; }
[ "$(wc -l <<<"$table")" -ge 30 ] || fail "only $(wc -l <<<"$table") settings in the table"

# bad KIND: a value no setting of KIND accepts; none for paths, which take any.
bad() {
    case $1 in
    boolean) echo maybe ;;
    choice) echo bogus ;;
    path) echo "" ;;
    "device sizes") echo 0=12abc ;;
    *) echo 12abc ;;
    esac
}

server_env=() client_env=() refused=()
while IFS=$'\t' read -r name mps side kind _ _ on_bad _; do
    var=$name
    [ "$mps" = - ] || var=$mps
    v=$(bad "$kind")
    if [ "$on_bad" = "client refused" ]; then
        refused+=("$var=$v")
    elif [ -z "$v" ]; then
        continue
    elif [ "$name" = MPSSHIM_MPS_DEFAULTS ]; then
        # mpsshim-control refuses to run with a bad one (its rule, server/control/ctl.c).
        out=$(env "$var=$v" "$CTL" -d 2>&1 </dev/null) && fail "mpsshim-control took $var=$v"
        grep -qF "$var=$v" <<<"$out" || fail "mpsshim-control does not name $var=$v: $out"
    elif [ "$side" = client ]; then
        client_env+=("$var=$v")
    else
        server_env+=("$var=$v")
    fi
done <<<"$table"
echo "bad values: ${#server_env[@]} server, ${#client_env[@]} client, ${#refused[@]} refusing"

# The server: every bad value at once; each said in the log, and the defaults in force.
env "${server_env[@]}" "$CTL" -d || fail "the server did not start with bad values"
status=$(ctl get_server_status)
for e in "${server_env[@]}"; do
    grep -qF "${e} is not " "$LOG" || fail "server.log does not say that $e is bad"
    grep -qF "(default: ${e} refused)" <<<"$status" || fail "get_server_status does not say $e"
done
# MPSSHIM_MAX_CLIENTS=12abc once refused every client; the default serves them. The client's
# own settings: said on its stderr, and it runs.
out=$(shim env "${client_env[@]}" "$B/tests/vecadd" 1000 2>&1) ||
    fail "a client with bad settings failed: $out"
grep -q "running directly on the CUDA driver" <<<"$out" && fail "the client fell back: $out"
for e in "${client_env[@]}"; do
    grep -qF "mpsshim: ${e} is not " <<<"$out" || fail "the client does not say that $e is bad"
done
# A client's limit: said (the variable named as set), and the client refused.
for e in "${refused[@]}"; do
    if out=$(shim env "$e" "$B/tests/vecadd" 1000 2>&1); then
        fail "a client with $e was not refused"
    fi
    grep -qF "mpsshim: $e is not " <<<"$out" || fail "the refusal does not name $e: $out"
done
stop_server 10 || fail "the server did not quit"

# Good values, taken as meant (and booleans in words).
# expect SETTINGS WANT...: a server with SETTINGS says each WANT in its log or status.
expect() {
    local settings=$1 want
    shift
    : >"$LOG"
    # shellcheck disable=SC2086 # SETTINGS is a list of VAR=VALUE
    env $settings "$CTL" -d || { fail "no server with $settings"; return; }
    status=$(ctl get_server_status)
    for want in "$@"; do
        { cat "$LOG"; echo "$status"; } | grep -qF "$want" ||
            fail "$settings: neither log nor status says $want"
    done
    grep -q " is not " "$LOG" && fail "$settings: a good value refused: $(grep ' is not ' "$LOG")"
    stop_server 10 || fail "the server did not quit"
}
expect "MPSSHIM_DEVICE_VMM=0 MPSSHIM_MAX_CLIENTS=200" "cuMemAlloc is the driver's" \
    "Setting MPSSHIM_MAX_CLIENTS=200 (env MPSSHIM_MAX_CLIENTS)" \
    "Setting MPSSHIM_DEVICE_VMM=0 (env MPSSHIM_DEVICE_VMM)"
expect "MPSSHIM_DEVICE_VMM=1" "cuMemAlloc is served from the server's arena"
expect "MPSSHIM_DEVICE_VMM=yes MPSSHIM_QUEUE_LIMIT=1G" \
    "cuMemAlloc is served from the server's arena" \
    "Setting MPSSHIM_QUEUE_LIMIT=1G (env MPSSHIM_QUEUE_LIMIT)"
expect "MPSSHIM_DEVICE_VMM=off MPSSHIM_DEVICE_POOL=1" "from the server's memory pool"
# The client limit unset: what this machine sustains, worked out at start (capacity.c).
expect "" "(default, worked out at start)" "clients at once (MPSSHIM_MAX_CLIENTS, worked out at start"
[ $rc = 0 ] && echo "PASS every setting's bad value said, defaulted or refused; good values taken"
exit $rc
