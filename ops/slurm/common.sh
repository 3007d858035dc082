# shellcheck shell=sh
# Sourced by the Slurm prolog, epilog and task prolog of mpsshim (docs/operations.md):
# the site's settings and the job's directories. One server per job and node, started by
# the Prolog as the job's user, found by the tasks through the TaskProlog's exports,
# stopped by the Epilog.

# The site's settings, a shell fragment (ops/slurm/slurm.conf.example); may be absent.
MPSSHIM_SLURM_CONF=${MPSSHIM_SLURM_CONF:-/etc/mpsshim/slurm.conf}
# asked: only jobs whose --comment has the word mpsshim (or mpsshim:pct=N); all: every job.
MPSSHIM_SLURM_JOBS=asked
# Parents of the per-job pipe and log directories (job-<id> in each), made by the Prolog.
MPSSHIM_SLURM_PIPE_ROOT=/run/mpsshim-slurm
MPSSHIM_SLURM_LOG_ROOT=/var/log/mpsshim-slurm
# The job's server's default active thread percentage when the job names none (empty: 100).
MPSSHIM_SLURM_PCT=
# 1: the TaskProlog also exports LD_PRELOAD with the shim (else tasks use mpsshim-run).
MPSSHIM_SLURM_PRELOAD=0
# 1: a server that does not start fails the Prolog (Slurm then drains the node and
# requeues the job); 0: the tasks run directly on the driver and are told why.
MPSSHIM_SLURM_STRICT=0
# mpsshim-control and the shim, from where these scripts are installed
# (PREFIX/lib/mpsshim/slurm); the site file may name others.
MPSSHIM_SLURM_HERE=$(cd "$(dirname "$0")" && pwd)
MPSSHIM_SLURM_BINDIR=$(cd "$MPSSHIM_SLURM_HERE/../../.." && pwd)/bin
MPSSHIM_SLURM_SHIM=$(cd "$MPSSHIM_SLURM_HERE/.." && pwd)/libmpsshim.so
if [ -r "$MPSSHIM_SLURM_CONF" ]; then
    # shellcheck disable=SC1090
    . "$MPSSHIM_SLURM_CONF"
fi

# A job id that is not a number would make the paths below (and the rm -rf) anything.
case ${SLURM_JOB_ID:-} in
'' | *[!0-9]*)
    echo "mpsshim-slurm: SLURM_JOB_ID is not a job id: '${SLURM_JOB_ID:-}'" >&2
    exit 0
    ;;
esac
JOB_PIPE=$MPSSHIM_SLURM_PIPE_ROOT/job-$SLURM_JOB_ID
JOB_LOG=$MPSSHIM_SLURM_LOG_ROOT/job-$SLURM_JOB_ID

# job_pct: the percentage the job asked for with --comment=mpsshim:pct=N, else the site's.
job_pct() {
    p=$(printf '%s\n' "${SLURM_JOB_COMMENT:-}" | sed -n 's/.*mpsshim:pct=\([0-9][0-9]*\).*/\1/p')
    printf '%s\n' "${p:-$MPSSHIM_SLURM_PCT}"
}

# job_wants: the job is to have a server (MPSSHIM_SLURM_JOBS=all, or asked in its comment).
job_wants() {
    [ "$MPSSHIM_SLURM_JOBS" = all ] && return 0
    case " ${SLURM_JOB_COMMENT:-} " in
    *[!A-Za-z0-9_]mpsshim[!A-Za-z0-9_]*) return 0 ;;
    esac
    return 1
}

# as_job_user [-t SECS] CMD...: CMD as the job's user (the server serves only its own
# user); the scripts run as root (Prolog, Epilog) or as that user already (TaskProlog).
# -t: killed after SECS (timeout runs as root: the user cannot stop it). Fd 9 (the
# Prolog's log, root's) is not handed on.
as_job_user() {
    aju_t=
    if [ "$1" = -t ]; then
        aju_t="timeout -k 2 $2"
        shift 2
    fi
    # shellcheck disable=SC2086 # aju_t: empty, or timeout's words
    if [ "$(id -u)" = "$SLURM_JOB_UID" ]; then
        $aju_t "$@" 9>&-
    else
        $aju_t setpriv --reuid="$SLURM_JOB_UID" --regid="$SLURM_JOB_GID" --init-groups "$@" 9>&-
    fi
}

# is_job_server PID: PID is this job's server, by what the kernel says of it (never by a
# file the job's user can write): its real, effective, saved and file-system uids are all
# the job's user's, its program is the installed mpsshim-server, and the environment it
# was started with names this job's pipe directory (the Prolog's export). Only the job's
# user can make a process pass, and then one of its own. JOB_SERVER_BIN: set by
# stop_job_server.
is_job_server() {
    [ "$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$1/status" 2>/dev/null)" = \
        "$SLURM_JOB_UID $SLURM_JOB_UID $SLURM_JOB_UID $SLURM_JOB_UID" ] || return 1
    ijs_exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
    # (deleted): the binary was replaced (reinstalled) while the server ran.
    [ "$ijs_exe" = "$JOB_SERVER_BIN" ] || [ "$ijs_exe" = "$JOB_SERVER_BIN (deleted)" ] || return 1
    # The prolog's (its pipe directory), or one the job's tasks started themselves (a job
    # that did not ask for a server, its tasks through mpsshim-run: the job's id in its
    # environment; the shim's default pipe directory under Slurm is the job's own).
    tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null |
        grep -qxF -e "MPSSHIM_PIPE_DIRECTORY=$JOB_PIPE" -e "SLURM_JOB_ID=$SLURM_JOB_ID"
}

# signal_job_servers SIG: SIG to each of the job's servers, each pid checked again right
# before, sent as the job's user (the kernel refuses any process of another user); then
# waits up to $2 tenths of a second for them all to be gone. Left open: a pid that exits and
# is reused between the check and the signal; only by a process of the job's user, then.
signal_job_servers() {
    sjs_left=$(job_servers)
    for sjs_pid in $sjs_left; do
        # shellcheck disable=SC2016 # $1, $2: the inner shell's
        is_job_server "$sjs_pid" &&
            as_job_user sh -c 'kill -"$1" "$2"' sh "$1" "$sjs_pid" 2>/dev/null
    done
    sjs_n=0
    while [ -n "$sjs_left" ] && [ $sjs_n -lt "$2" ]; do
        sleep 0.1
        sjs_left=$(job_servers)
        sjs_n=$((sjs_n + 1))
    done
}

# job_servers: the pids of this job's servers (is_job_server), one a line; a fresh start
# (execve of itself) or a handover keeper passes as well.
job_servers() {
    # One grep over every process's uids first, so that only the job's user's are looked
    # at further.
    grep -s '^Uid:' /proc/[0-9]*/status |
        awk -v u="$SLURM_JOB_UID" '$2 == u && $3 == u && $4 == u && $5 == u {
            split($1, f, "/"); print f[3] }' |
        while read -r js_pid; do
            is_job_server "$js_pid" && echo "$js_pid"
        done
}

# stop_job_server: asks the job's server to quit (returns once it has exited), stops what is
# left of the job's servers (is_job_server: the prolog's, or ones its tasks started), and
# removes the pipe directory. The log directory stays.
# Root trusts nothing in the pipe directory, which is the user's: the server.pid there
# may name anyone's process, the sockets may be anything. The quit goes as the job's user
# (whatever answers on control.sock, root never speaks to it), bounded in time; the signals
# only to processes that the kernel says are this job's servers, sent as the job's user.
stop_job_server() {
    JOB_SERVER_BIN=$(readlink -f "$MPSSHIM_SLURM_BINDIR/mpsshim-server")
    if [ -S "$JOB_PIPE/control.sock" ]; then
        echo quit | as_job_user -t 30 env MPSSHIM_PIPE_DIRECTORY="$JOB_PIPE" \
            "$MPSSHIM_SLURM_BINDIR/mpsshim-control" >/dev/null 2>&1
    fi
    # What did not quit: SIGTERM (a server quits as for `quit`, its clients told), then
    # SIGKILL after 5 s; a killed one is gone within moments (its GPU memory with it).
    signal_job_servers TERM 50
    [ -z "$sjs_left" ] || signal_job_servers KILL 50
    # rm does not follow links, and the directory's parent is root's: the user cannot
    # swap the directory itself for a link.
    [ ! -d "$JOB_PIPE" ] || rm -rf "$JOB_PIPE"
}
