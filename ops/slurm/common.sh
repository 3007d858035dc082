# shellcheck shell=sh
# Sourced by the Slurm prolog, epilog and task prolog of mpsshim (README, "Operations"):
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

# as_job_user CMD...: CMD as the job's user (the server serves only its own user); the
# scripts run as root (Prolog, Epilog) or as that user already (TaskProlog).
as_job_user() {
    if [ "$(id -u)" = "$SLURM_JOB_UID" ]; then
        "$@"
    else
        setpriv --reuid="$SLURM_JOB_UID" --regid="$SLURM_JOB_GID" --init-groups "$@"
    fi
}

# stop_job_server: asks the job's server to quit (returns once it has exited), kills it if
# it is still there, and removes the pipe directory. The log directory stays.
stop_job_server() {
    [ -d "$JOB_PIPE" ] || return 0
    pid=$(cat "$JOB_PIPE/server.pid" 2>/dev/null)
    if [ -S "$JOB_PIPE/control.sock" ]; then
        echo quit | as_job_user env MPSSHIM_PIPE_DIRECTORY="$JOB_PIPE" \
            "$MPSSHIM_SLURM_BINDIR/mpsshim-control" >/dev/null 2>&1
    fi
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = mpsshim-server ]; then
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -rf "$JOB_PIPE"
}
