#!/usr/bin/env bash
# The Slurm prolog and epilog of ops/slurm (as installed) against a hostile job user, as
# the attacks of issue 34 ran: no Slurm, the scripts run as Slurm runs them (root, a bare
# environment with SLURM_JOB_*), for jobs of two throwaway users, mpsshim-a and mpsshim-b
# (made here, removed after), each job served by its own server on the CPU test driver.
# - S2: B writes the pid of A's server (another job's) into its own job's server.pid, once
#   with the control socket there and once with it removed (so that only a kill stops
#   B's server); the epilog of B's job must stop B's server and leave A's serving.
# - S3: B makes prolog.log of its job's log directory a link to a file of root's, once
#   left from an earlier run of the job (a requeue keeps its id) and once while the prolog
#   runs (mpsshim-control as B, wrapped), and forces the prolog to fail with
#   --comment=mpsshim:pct=500: root's file must be unchanged.
# bash tests/slurm_hostile.sh BUILD_DIR; exits 77 (skip) when not root, 1 on failure.
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
FAILED=0
DONE=0 # set at the end: an interrupted run keeps its files
ok() { echo "ok $1"; }
bad() { echo "FAIL $1: $2"; FAILED=1; }

unset MPSSHIM_PIPE_DIRECTORY MPSSHIM_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY \
    MPSSHIM_AUTOSTART MPSSHIM_DRIVER MPSSHIM_SERVER MPSSHIM_TEST_KERNELS MPSSHIM_CPUDRV_DEVICES
[ "$(id -u)" = 0 ] || skip "needs root (the prolog and epilog run as root; two users of its own)"
for p in setpriv useradd userdel timeout; do
    command -v $p >/dev/null || skip "no $p"
done

S=$(mktemp -d /tmp/mpsshim-hostile.XXXXXX)
chmod 755 "$S" # the jobs' users go through it to the installed tree
I=$S/inst/usr/local
SLURMDIR=$I/lib/mpsshim/slurm
USERS_MADE=""

# servers_here: the servers of any job of this test (their environment names our pipe
# root), as the no-server-left check of tests/slurm.sh finds them.
servers_here() {
    local e
    for e in /proc/[0-9]*/environ; do
        grep -qs "MPSSHIM_PIPE_DIRECTORY=$S/run/" "$e" &&
            [ "$(cat "${e%/environ}/comm" 2>/dev/null)" = mpsshim-server ] && { e=${e%/environ}; echo "${e#/proc/}"; }
    done
}
cleanup() {
    local p u
    for p in $(servers_here); do kill -KILL "$p" 2>/dev/null; done
    sleep 0.2
    for u in $USERS_MADE; do userdel "$u" 2>/dev/null || echo "userdel $u failed"; done
    if [ "$FAILED" = 0 ] && [ "$DONE" = 1 ]; then rm -rf "$S"; else echo "files in $S"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

make -C "$ROOT" --no-print-directory B="$B" PREFIX=/usr/local DESTDIR="$S/inst" install >"$S/install.log" 2>&1 ||
    { cat "$S/install.log"; bad make-install "see above"; exit 1; }
install -D -m 755 "$B/cpudrv/libcuda.so.1" "$S/drv/libcuda.so.1"
chmod -R a+rX "$S/inst"

for u in mpsshim-a mpsshim-b; do
    if ! id -u "$u" >/dev/null 2>&1; then
        useradd -M -U -d /nonexistent -s /usr/sbin/nologin "$u" || skip "useradd $u failed"
        USERS_MADE="$USERS_MADE $u"
    fi
done

cat >"$S/site.conf" <<EOC
MPSSHIM_SLURM_PIPE_ROOT=$S/run
MPSSHIM_SLURM_LOG_ROOT=$S/log
export MPSSHIM_DRIVER=$S/drv/libcuda.so.1
EOC

# slurm SCRIPT JOB USER COMMENT [SITE_FILE]: the installed SCRIPT as Slurm runs it for job
# JOB of USER with --comment=COMMENT: as root, in a bare environment.
slurm() {
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_JOB_ID="$2" SLURM_JOB_UID="$(id -u "$3")" \
        SLURM_JOB_GID="$(id -g "$3")" SLURM_JOB_USER="$3" SLURM_JOB_COMMENT="$4" \
        MPSSHIM_SLURM_CONF="${5:-$S/site.conf}" sh "$SLURMDIR/$1"
}
# as USER CMD...: CMD as USER (what that user can do on the node, in a job or out of one).
as() {
    local u=$1
    shift
    setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" --init-groups "$@"
}
# serving PID: PID is a live mpsshim-server.
serving() {
    [ -e "/proc/$1" ] && ! grep -qs '^State:[[:space:]]*[ZX]' "/proc/$1/status" &&
        [ "$(cat "/proc/$1/comm" 2>/dev/null)" = mpsshim-server ]
}
# answers USER JOB: the server of JOB answers USER's get_server_status.
answers() {
    echo get_server_status | as "$1" env MPSSHIM_PIPE_DIRECTORY="$S/run/job-$2" "$I/bin/mpsshim-control" 2>&1 |
        grep -q '^Status ACTIVE'
}
# started JOB USER: the prolog of JOB for USER started its server; prints its pid.
started() {
    slurm prolog "$1" "$2" mpsshim >"$S/prolog-$1.out" 2>&1
    local pid
    pid=$(cat "$S/run/job-$1/server.pid" 2>/dev/null)
    if [ -n "$pid" ] && serving "$pid" && answers "$2" "$1"; then
        echo "$pid"
    else
        cat "$S/prolog-$1.out" "$S/log/job-$1/server.log" 2>/dev/null >&2
        return 1
    fi
}

# ---------------------------------------------------------------- S2: the epilog's kill
A_PID=$(started 101 mpsshim-a) || { bad start-a "job 101 of mpsshim-a has no server"; exit 1; }
for job in 102 103; do
    B_PID=$(started $job mpsshim-b) || { bad start-b "job $job of mpsshim-b has no server"; exit 1; }
    how="server.pid names A's server"
    if [ $job = 103 ]; then
        # No quit can reach B's server: only a kill stops it.
        as mpsshim-b rm -f "$S/run/job-$job/control.sock"
        how="$how, control.sock removed"
    fi
    as mpsshim-b sh -c 'echo "$1" >"$2"' sh "$A_PID" "$S/run/job-$job/server.pid" ||
        { bad attack-$job "mpsshim-b could not write its server.pid"; exit 1; }
    slurm epilog $job mpsshim-b mpsshim >"$S/epilog-$job.out" 2>&1
    if serving "$A_PID" && answers mpsshim-a 101; then
        ok "epilog-spares-other-user-$job ($how)"
    else
        bad "epilog-spares-other-user-$job" "$how: the epilog of B's job $job stopped A's server $A_PID"
    fi
    serving "$B_PID" && bad "epilog-stops-own-server-$job" "$how: B's server $B_PID still runs" ||
        ok "epilog-stops-own-server-$job"
    [ ! -e "$S/run/job-$job" ] && ok "epilog-removes-pipe-dir-$job" ||
        bad "epilog-removes-pipe-dir-$job" "$(ls -la "$S/run/job-$job" 2>&1)"
    if ! serving "$A_PID"; then # the next round needs A's server
        A_PID=$(started 101 mpsshim-a) || { bad start-a "job 101 of mpsshim-a has no server"; exit 1; }
    fi
done
slurm epilog 101 mpsshim-a mpsshim >"$S/epilog-101.out" 2>&1
serving "$A_PID" && bad epilog-stops-a "A's server $A_PID still runs after its own job's epilog" || ok epilog-stops-a

# ---------------------------------------------------------------- S3: the prolog's log
TARGET=$S/root-file # root's; the prolog must never write to it
echo "root's file, not the prolog's log" >"$TARGET"
chmod 644 "$TARGET"
want=$(cat "$TARGET")

# Left from an earlier run of the job: the log directory stays after the epilog, and a
# requeued job keeps its id.
started 104 mpsshim-b >/dev/null || { bad start-b "job 104 of mpsshim-b has no server"; exit 1; }
slurm epilog 104 mpsshim-b mpsshim >/dev/null 2>&1
as mpsshim-b ln -sfn "$TARGET" "$S/log/job-104/prolog.log" || { bad attack-104 "no link"; exit 1; }
slurm prolog 104 mpsshim-b mpsshim:pct=500 >"$S/prolog-104b.out" 2>&1
grep -q 'set_default_active_thread_percentage 500' "$S/prolog-104b.out" ||
    { cat "$S/prolog-104b.out"; bad prolog-fails-104 "the prolog did not fail on pct=500 (output above)"; }
[ "$(cat "$TARGET")" = "$want" ] && ok "prolog-log-link-requeue" ||
    bad prolog-log-link-requeue "root's file now holds: $(cat "$TARGET")"
L=$S/log/job-104/prolog.log
[ ! -L "$L" ] && [ "$(stat -c %u "$L" 2>/dev/null)" = 0 ] && grep -q 'percentage 500' "$L" &&
    ok prolog-log-kept || bad prolog-log-kept "$(ls -la "$S/log/job-104" 2>&1; cat "$L" 2>&1)"
slurm epilog 104 mpsshim-b mpsshim >/dev/null 2>&1

# While the prolog runs: mpsshim-control, run by the prolog as B, is B's program then
# (B could as well act from a process of its own, at that moment).
mkdir -p "$S/plant"
printf '#!/bin/sh\nln -sfn %s "$MPSSHIM_LOG_DIRECTORY/prolog.log"\nexec %s "$@"\n' "$TARGET" \
    "$I/bin/mpsshim-control" >"$S/plant/mpsshim-control"
chmod 755 "$S/plant" "$S/plant/mpsshim-control"
{ cat "$S/site.conf"; echo "MPSSHIM_SLURM_BINDIR=$S/plant"; } >"$S/site-plant.conf"
slurm prolog 105 mpsshim-b mpsshim:pct=500 "$S/site-plant.conf" >"$S/prolog-105.out" 2>&1
[ -L "$S/log/job-105/prolog.log" ] || bad attack-105 "no link made during the prolog"
grep -q 'set_default_active_thread_percentage 500' "$S/prolog-105.out" ||
    { cat "$S/prolog-105.out"; bad prolog-fails-105 "the prolog did not fail on pct=500 (output above)"; }
[ "$(cat "$TARGET")" = "$want" ] && ok "prolog-log-link-during" ||
    bad prolog-log-link-during "root's file now holds: $(cat "$TARGET")"
slurm epilog 105 mpsshim-b mpsshim >/dev/null 2>&1

left=$(servers_here)
[ -z "$left" ] && ok no-server-left || bad no-server-left "$left"
DONE=1
if [ $FAILED = 0 ]; then echo 'slurm-hostile: all passed'; else echo 'slurm-hostile: FAILED'; fi
exit $FAILED
