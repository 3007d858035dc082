#!/usr/bin/env bash
# MPS's own scripts against mpsshim's compatibility names (docs/mps-compat.md): `make
# install-mps-compat` into a temporary PREFIX, then, with that directory first on PATH,
# the sequences of NVIDIA's MPS guide as it writes them. As root: the PBS/Torque prologue
# (daemon with -d, start_server -uid for the job's user), the job's clients (as that user),
# get_server_list / get_client_list / get_device_client_list, shutdown_server, and the
# epilogue (quit, then no MPS process left), twice (the second job's daemon takes the pipe
# directory back). As a user (as root: as nobody, through setpriv): the single-user
# sequence. Servers of its own, on the CPU test driver, in directories of its own (set with
# MPS's variables: never /tmp/nvidia-mps, which a real MPS may use).
# Usage: tests/mps_compat.sh BUILD_DIR. Prints "ok NAME" or "FAIL NAME: what was seen".
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FAILED=0
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
# MPS's variables are what the scripts set; ours would win over them.
unset MPSSHIM_PIPE_DIRECTORY MPSSHIM_LOG_DIRECTORY MPSSHIM_MPS_DEFAULTS MPSSHIM_AUTOSTART SLURM_JOB_ID
ok() { echo "ok $1"; }
bad() { echo "FAIL $1: $2"; FAILED=1; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got [$2], want [$3]"; fi; }
# served NAME OUT: OUT is a passing vecadd that a server ran (no fallback to the driver)
served() {
    if grep -q '^PASS vecadd' <<<"$2" && ! grep -q 'running directly' <<<"$2"; then
        ok "$1"
    else
        bad "$1" "$2"
    fi
}
# uids PID: the real, effective, saved and file-system uids of PID
uids() { awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$1/status" 2>/dev/null; }

# The single-user sequence (MPS guide, "On a Single-User System"), as whoever runs it.
# MPS_COMPAT_DIR: where it works; PATH has the compatibility names first.
single_user() {
    local W=$MPS_COMPAT_DIR me out S
    me=$(id -u)
    export CUDA_MPS_PIPE_DIRECTORY=$W/pipe CUDA_MPS_LOG_DIRECTORY=$W/log
    nvidia-cuda-mps-control -d && ok user-daemon || { bad user-daemon "-d failed"; return; }
    out=$(echo "start_server -uid $me" | nvidia-cuda-mps-control) &&
        check user-start-own "$out" "" || bad user-start-own "rc $? [$out]"
    out=$(echo "start_server -uid 12345" | nvidia-cuda-mps-control)
    check user-start-other-rc "$?" 1
    grep -q "^Cannot start a server for user 12345: " <<<"$out" &&
        ok user-start-other-says-why || bad user-start-other-says-why "$out"
    S=$(echo get_server_list | nvidia-cuda-mps-control)
    check user-server-uid "$(uids "$S")" "$me $me $me $me"
    served user-client "$(LD_PRELOAD="$SHIM" MPSSHIM_AUTOSTART=0 "$B/tests/vecadd" 1000 2>&1)"
    out=$(echo "shutdown_server $S" | nvidia-cuda-mps-control) &&
        check user-shutdown "$out" "" || bad user-shutdown "rc $? [$out]"
    out=$(echo quit | nvidia-cuda-mps-control) && check user-quit "$out" "" ||
        bad user-quit "rc $? [$out]"
    wait_for 10 gone "$S" && ok user-server-gone || bad user-server-gone "$S still runs"
    grep -q "Command: start_server -uid $me" "$W/log/control.log" &&
        ok user-log-in-mps-log-dir || bad user-log-in-mps-log-dir "$(ls -l "$W/log")"
}
if [ "${2:-}" = single-user ]; then
    single_user
    exit $FAILED
fi

W=$(mktemp -d /tmp/mpsshim-mpscompat.XXXXXX)
P=$W/prefix
cleanup() {
    for d in "$W"/*/pipe; do
        [ -S "$d/control.sock" ] && MPSSHIM_PIPE_DIRECTORY=$d "$B/mpsshim-control" <<<quit >/dev/null 2>&1
    done
    [ "$FAILED" = 0 ] && rm -rf "$W"
}
trap cleanup EXIT

make -C "$ROOT" --no-print-directory B="$B" PREFIX="$P" install-mps-compat >"$W/install.log" 2>&1 &&
    ok make-install-mps-compat || { bad make-install-mps-compat "$(tail -n 20 "$W/install.log")"; exit 1; }
COMPAT=$P/lib/mpsshim/mps-compat/bin
SHIM=$P/lib/mpsshim/libmpsshim.so
export PATH=$COMPAT:$PATH
check compat-names "$(ls "$COMPAT")" "$(printf '%s\n' nvidia-cuda-mps-control nvidia-cuda-mps-server)"
# Never over NVIDIA's files: a name there that is not ours is left alone, and refused.
echo "NVIDIA's" >"$COMPAT/nvidia-cuda-mps-server.x" && mv -f "$COMPAT/nvidia-cuda-mps-server.x" \
    "$COMPAT/nvidia-cuda-mps-server"
make -C "$ROOT" --no-print-directory B="$B" PREFIX="$P" install-mps-compat >"$W/refuse.log" 2>&1 &&
    bad refuses-nvidia-files "installed over a file not ours" || ok refuses-nvidia-files
check nvidia-file-kept "$(cat "$COMPAT/nvidia-cuda-mps-server")" "NVIDIA's"
rm -f "$COMPAT/nvidia-cuda-mps-server"
make -C "$ROOT" --no-print-directory B="$B" PREFIX="$P" install-mps-compat >>"$W/install.log" 2>&1 ||
    bad reinstall "$(tail -n 5 "$W/install.log")"

# MPS's default directories under NVIDIA's names (nothing is started there: a real MPS
# may be using them); MPSSHIM_MPS_DEFAULTS=1 gives them to mpsshim's names, 0 takes them
# away from NVIDIA's.
nodir() { "$@" </dev/null 2>&1 | sed -n 's/^Cannot connect to an mpsshim server in \([^:]*\):.*/\1/p'; }
check default-pipe-dir "$(nodir nvidia-cuda-mps-control)" /tmp/nvidia-mps
check defaults-variable "$(MPSSHIM_MPS_DEFAULTS=1 nodir "$P/bin/mpsshim-control")" /tmp/nvidia-mps
check defaults-off "$(MPSSHIM_MPS_DEFAULTS=0 nodir nvidia-cuda-mps-control)" "/tmp/mpsshim-$(id -u)"
check own-variable-wins "$(MPSSHIM_PIPE_DIRECTORY=$W/x CUDA_MPS_PIPE_DIRECTORY=$W/y \
    nodir nvidia-cuda-mps-control)" "$W/x"
check defaults-bad-value "$(MPSSHIM_MPS_DEFAULTS=yes nvidia-cuda-mps-control </dev/null 2>&1)" \
    "MPSSHIM_MPS_DEFAULTS=yes: 1 (MPS's default directories) or 0"

# The PBS/Torque prologue and epilogue of the MPS guide, for a job of USERID, run as root.
job() {
    local n=$1 USERID=65534 out S H
    export CUDA_MPS_PIPE_DIRECTORY=$W/job/pipe CUDA_MPS_LOG_DIRECTORY=$W/job/log
    # Prologue.
    nvidia-cuda-mps-control -d && echo "MPS control daemon started" || bad "job$n-daemon" "-d failed"
    sleep 1
    echo "start_server -uid $USERID" | nvidia-cuda-mps-control && echo "MPS server started for $USERID" ||
        bad "job$n-start-server" "rc $?"
    S=$(echo get_server_list | nvidia-cuda-mps-control)
    check "job$n-server-uid" "$(uids "$S")" "$USERID $USERID $USERID $USERID"
    check "job$n-server-exe" "$(readlink "/proc/$S/exe")" "$P/bin/mpsshim-server"
    ps aux | grep nvidia-cuda-mps-control | grep -v grep >/dev/null &&
        ok "job$n-ps-shows-daemon" || bad "job$n-ps-shows-daemon" "$(ps aux | grep mps)"
    # The job: its clients, as its user.
    as_user() { setpriv --reuid=$USERID --regid=$USERID --clear-groups env LD_PRELOAD="$SHIM" \
        MPSSHIM_AUTOSTART=0 "$@"; }
    served "job$n-client" "$(as_user "$B/tests/vecadd" 1000 2>&1)"
    setpriv --reuid=$USERID --regid=$USERID --clear-groups env LD_PRELOAD="$SHIM" \
        MPSSHIM_AUTOSTART=0 "$B/tests/hold" 60 >"$W/hold$n.log" 2>&1 &
    H=$! # setpriv and env exec: the client itself
    wait_for 20 grep -q ready "$W/hold$n.log" || bad "job$n-hold" "$(cat "$W/hold$n.log")"
    # The vecadd client above may still be on the list a moment (its departure is seen by
    # the server as it is, asynchronously; a loaded CI machine showed it once).
    only_hold() { [ "$(echo "get_client_list $S" | nvidia-cuda-mps-control)" = "$H" ]; }
    wait_for 10 only_hold
    check "job$n-client-list" "$(echo "get_client_list $S" | nvidia-cuda-mps-control)" "$H"
    out=$(echo "get_device_client_list $S" | nvidia-cuda-mps-control)
    check "job$n-device-client-list" "$(grep -Ec "^GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12} $H\$" <<<"$out")" 2
    # Root may not hand an occupied server over.
    out=$(echo "start_server -uid 0" | nvidia-cuda-mps-control)
    check "job$n-start-root-refused" "$(grep -c "^Cannot start a server for user 0: " <<<"$out")" 1
    # shutdown_server -f ends the client's work at once (as terminate_client: the idle
    # client itself runs on, its calls failing); the daemon stays and serves again.
    echo "shutdown_server $S -f" | nvidia-cuda-mps-control || bad "job$n-shutdown-f" "rc $?"
    check "job$n-no-clients" "$(echo "get_client_list $S" | nvidia-cuda-mps-control)" ""
    kill "$H"
    served "job$n-served-after-shutdown-f" "$(as_user "$B/tests/vecadd" 1000 2>&1)"
    echo "shutdown_server $S" | nvidia-cuda-mps-control || bad "job$n-shutdown" "rc $?"
    # Epilogue.
    ps aux | grep nvidia-cuda-mps-control | grep -v grep >/dev/null &&
        echo quit | nvidia-cuda-mps-control || bad "job$n-quit" "not running, or quit failed"
    wait_for 10 gone "$S" && ok "job$n-no-mps-left" || bad "job$n-no-mps-left" "$(ps aux | grep mps)"
}
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    # The job's directories sit where every user may reach them, as /tmp/nvidia-mps does.
    mkdir -p "$W/job" && chmod 755 "$W" "$W/job"
    chmod -R a+rX "$B" "$P" 2>/dev/null
    job 1
    job 2 # the pipe directory is the first job's user's: the daemon takes it back
    mkdir -p "$W/user" && chown 65534:65534 "$W/user"
    setpriv --reuid=65534 --regid=65534 --clear-groups env PATH="$PATH" MPS_COMPAT_DIR="$W/user" \
        bash "$0" "$B" single-user || FAILED=1
else
    echo "(root-only part skipped: needs root and setpriv)"
    MPS_COMPAT_DIR=$W/user single_user
fi
[ "$FAILED" = 0 ] && echo "all passed"
exit $FAILED
