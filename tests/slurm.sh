#!/usr/bin/env bash
# The Slurm recipe of ops/slurm against a real single-node Slurm (`make slurm-test`; CI's
# slurm-job): installs slurm-wlm and munge when missing (apt-get, as root), runs munged,
# slurmctld and slurmd on 127.0.0.1 from a private state directory (own ports, nothing
# in /etc), with the installed prolog, epilog and task prolog (make install into that
# directory). One job of 3 tasks, as user nobody, through mpsshim-run, asking for
# --comment=mpsshim:pct=50; the CPU test driver stands in for GPUs (no gres). Checks that
# ONE server (the prolog's, the job's user's) served the 3 tasks, with the percentage set,
# and that the epilog stopped it and removed its pipe directory; that a job which did not ask
# gets none, and that a server its task started itself (mpsshim-run) is stopped by the
# epilog too. Stops the daemons.
# bash tests/slurm.sh BUILD_DIR; exits 77 (skip) when Slurm cannot be had, 1 on failure.
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T0=$(date +%s%N)
# say MSG: MSG after the seconds since the start (the timings the report gives)
say() {
    local t=$((($(date +%s%N) - T0) / 100000000))
    printf '[%d.%ds] %s\n' $((t / 10)) $((t % 10)) "$*"
}
skip() { echo "SKIP: $*"; exit 77; }
FAILED=0
DONE=0 # set at the end: an interrupted run keeps its files
ok() { say "ok $1"; }
bad() { say "FAIL $1: $2"; FAILED=1; }

# srun hands the tasks our environment: none of a caller's mpsshim settings (ci.sh's).
unset MPSSHIM_PIPE_DIRECTORY MPSSHIM_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY \
    MPSSHIM_AUTOSTART MPSSHIM_DRIVER MPSSHIM_SERVER MPSSHIM_TEST_KERNELS MPSSHIM_CPUDRV_DEVICES
[ "$(id -u)" = 0 ] || skip "needs root (Slurm daemons, jobs as another user)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurmctld, slurmd, slurm-client and munge"
    # The daemons and commands alone (slurm-wlm would add 30 plugin packages we do not use).
    inst() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge 2>&1; }
    # Without package lists (a fresh machine) the install fails; once more after an update.
    out=$(inst) || out=$(apt-get update -q 2>&1 && inst) ||
        { echo "$out" | tail -n 20; skip "apt-get install slurm-wlm munge failed (output above)"; }
fi
for p in slurmctld slurmd munged srun setpriv; do
    command -v $p >/dev/null || skip "no $p after installing slurm-wlm and munge"
done
say "slurm $(slurmd -V 2>&1), $(munged -V 2>&1 | head -n 1)"

S=$(mktemp -d /tmp/mpsshim-slurm.XXXXXX)
chmod 755 "$S" # the job's user (nobody) goes through it to the installed tree
U=65534
NODE=mpsshimci
# Ports of our own: other Slurm tests (other checkouts) may run beside this one.
PORT=$((20000 + $$ % 20000 * 2))
PIPE_ROOT=$S/run LOG_ROOT=$S/log
I=$S/inst/usr/local
export SLURM_CONF=$S/slurm.conf

# servers_left: the pids of servers of this test's jobs (their environment names our pipe
# root), one a line.
servers_left() {
    local e
    for e in /proc/[0-9]*/environ; do
        grep -qs "MPSSHIM_PIPE_DIRECTORY=$PIPE_ROOT/" "$e" &&
            [ "$(cat "${e%/environ}/comm" 2>/dev/null)" = mpsshim-server ] && { e=${e%/environ}; echo "${e#/proc/}"; }
    done
}
cleanup() {
    local pids=""
    for f in slurmd slurmctld; do [ -f "$S/$f.ours" ] && pids="$pids $(cat "$S/$f.ours")"; done
    for p in $pids; do kill "$p" 2>/dev/null; done
    for _ in $(seq 50); do
        alive=0
        # (a daemon that exited stays a zombie, our child, until the wait below)
        for p in $pids; do ps -o stat= -p "$p" 2>/dev/null | grep -qv Z && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -f "$S/munged.pid" ] && kill "$(cat "$S/munged.pid")" 2>/dev/null
    # A server the epilog should have stopped: ours alone, by its environment (never by the
    # pid file in the job's user's directory, which may name anyone's process).
    for p in $(servers_left); do kill -KILL "$p" 2>/dev/null; done
    if [ "$FAILED" = 0 ] && [ "$DONE" = 1 ]; then rm -rf "$S"; else echo "files in $S"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP # timeout(1) sends TERM: the daemons go all the same

make -C "$ROOT" --no-print-directory B="$B" PREFIX=/usr/local DESTDIR="$S/inst" install >"$S/install.log" 2>&1 ||
    { cat "$S/install.log"; bad make-install "see above"; exit 1; }
chmod -R a+rX "$S/inst" "$B" 2>/dev/null

# munge: a key and a socket of our own.
# 755: srun drops to the job's user before it asks munged for a credential.
mkdir -m 755 "$S/munge"
dd if=/dev/urandom of="$S/munge/key" bs=1024 count=1 status=none && chmod 400 "$S/munge/key"
munged --force --key-file="$S/munge/key" --socket="$S/munge/sock" --pid-file="$S/munged.pid" \
    --log-file="$S/munged.log" --seed-file="$S/munge/seed" >"$S/munged.out" 2>&1 ||
    { cat "$S/munged.out" "$S/munged.log" 2>/dev/null; bad munged "did not start"; exit 1; }

# The prolog, epilog and task prolog are the installed ones; the wrappers only name the
# site file (Slurm gives them no environment of ours).
cat >"$S/mpsshim-slurm.conf" <<EOC
MPSSHIM_SLURM_PIPE_ROOT=$PIPE_ROOT
MPSSHIM_SLURM_LOG_ROOT=$LOG_ROOT
export MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1
export MPSSHIM_TEST_KERNELS=$B/tests
EOC
for s in prolog epilog task-prolog; do
    printf '#!/bin/sh\nMPSSHIM_SLURM_CONF=%s exec %s\n' "$S/mpsshim-slurm.conf" "$I/lib/mpsshim/slurm/$s" >"$S/$s"
    chmod 755 "$S/$s"
done
mkdir -p "$S/ctld" "$S/slurmd"
cat >"$SLURM_CONF" <<EOC
ClusterName=mpsshimci
# slurmctld serves only where the hostname is the one named here.
SlurmctldHost=$(hostname -s)(127.0.0.1)
MailProg=/bin/true
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/sock
CredType=cred/munge
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/slurmd
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# The server starts before the job's first task (Alloc), once per job and node.
PrologFlags=Alloc
Prolog=$S/prolog
Epilog=$S/epilog
TaskProlog=$S/task-prolog
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=10 State=UP
EOC
# In the foreground (-D) in the background: their pids are ours to stop (slurmd writes its
# pid file only once the controller answers). One that dies at once says why in its log.
for d in slurmctld slurmd; do
    args=(-D -f "$SLURM_CONF")
    [ $d = slurmctld ] && args+=(-i) # -i: no state from an earlier run
    [ $d = slurmd ] && args+=(-N "$NODE")
    $d "${args[@]}" >"$S/$d.out" 2>&1 &
    echo $! >"$S/$d.ours"
    sleep 0.5
    kill -0 "$(cat "$S/$d.ours")" 2>/dev/null ||
        { cat "$S/$d.out"; tail -n 20 "$S/$d.log"; bad $d "did not start"; exit 1; }
done
idle() { timeout 5 sinfo -h -n "$NODE" -o %t 2>/dev/null | grep -q '^idle'; }
for _ in $(seq 300); do idle && break; sleep 0.1; done
idle || { sinfo; tail -n 20 "$S/slurmctld.log" "$S/slurmd.log"; bad node-idle "the node never became idle"; exit 1; }
say "daemons up, node idle"

# The job: 3 tasks as nobody, each a client through the installed mpsshim-run; each prints
# the pipe directory the task prolog gave it, then vecadd's verdict.
out=$(cd /tmp && timeout 120 srun --uid=$U --gid=$U -N1 -n3 -t 2 --comment=mpsshim:pct=50 -J mpsshim-ci \
    sh -c 'echo "task $SLURM_PROCID pipe=$MPSSHIM_PIPE_DIRECTORY"; exec '"$I"'/bin/mpsshim-run '"$B"'/tests/vecadd 100000' 2>&1)
rc=$?
echo "$out"
JOB=$(grep -h "JobId=[0-9]*" -o "$S/slurmctld.log" | tail -n 1 | cut -d= -f2)
say "job $JOB done (srun exit $rc)"
[ $rc = 0 ] && ok srun-exit || bad srun-exit "$rc"
[ "$(echo "$out" | grep -c '^PASS vecadd')" = 3 ] && ok three-tasks-passed || bad three-tasks-passed "see above"
echo "$out" | grep -q 'running directly' && bad served-by-server "a task ran on the driver" || ok served-by-server
[ "$(echo "$out" | grep -c "pipe=$PIPE_ROOT/job-$JOB\$")" = 3 ] && ok task-prolog-exports ||
    bad task-prolog-exports "the tasks were not pointed at $PIPE_ROOT/job-$JOB"

# The epilog runs once the job ends; the node goes back to idle after it.
for _ in $(seq 300); do idle && [ ! -e "$PIPE_ROOT/job-$JOB" ] && break; sleep 0.1; done
LOG=$LOG_ROOT/job-$JOB/server.log
cat "$LOG" 2>/dev/null
started=$(grep -c "Server ready" "$LOG" 2>/dev/null)
clients=$(grep -c "New client [0-9]* connected" "$LOG" 2>/dev/null)
[ "$started" = 1 ] && [ "$clients" = 3 ] && ok one-server-three-clients ||
    bad one-server-three-clients "servers started: $started, clients: $clients"
[ "$(grep -c "limits: active thread percentage 50 " "$LOG" 2>/dev/null)" = 3 ] && ok pct-from-comment ||
    bad pct-from-comment "no 3 clients with the 50% the comment asked for"
[ "$(stat -c %u "$LOG" 2>/dev/null)" = $U ] && ok server-as-job-user || bad server-as-job-user "log owner $(stat -c %u "$LOG" 2>&1)"
grep -q "Server exited" "$LOG" && ok epilog-stopped-server || bad epilog-stopped-server "no exit in the log"
[ ! -e "$PIPE_ROOT/job-$JOB" ] && ok pipe-dir-removed || bad pipe-dir-removed "$(ls -la "$PIPE_ROOT/job-$JOB" 2>&1)"
left=$(servers_left)
[ -z "$left" ] && ok no-server-left || bad no-server-left "$left"

# A job that does not ask (no mpsshim in its comment) gets no server and no exports.
out=$(cd /tmp && timeout 60 srun --uid=$U --gid=$U -N1 -n1 -t 1 -J plain sh -c 'echo "pipe=${MPSSHIM_PIPE_DIRECTORY:-none}"' 2>&1)
echo "$out"
JOB2=$(grep -h "JobId=[0-9]*" -o "$S/slurmctld.log" | tail -n 1 | cut -d= -f2)
[ "$out" = "pipe=none" ] && [ "$JOB2" != "$JOB" ] && [ ! -e "$LOG_ROOT/job-$JOB2" ] && ok plain-job-no-server ||
    bad plain-job-no-server "job $JOB2: $out, $(ls "$LOG_ROOT" 2>&1)"

# A job that does not ask, whose task uses mpsshim-run all the same: the task starts a server
# of its own (in the job's default pipe directory), served by it; the epilog stops it.
# (After the last job's epilog: a job queued behind it lost its allocation's answer to srun
# --uid, munge refusing root's credential to the dropped srun.)
for _ in $(seq 100); do idle && break; sleep 0.1; done
# (The CPU test driver named for the task as the site file names it for the prolog's.)
out=$(cd /tmp && timeout 60 srun --uid=$U --gid=$U -N1 -n1 -t 1 -J own \
    env MPSSHIM_DRIVER="$B/cpudrv/libcuda.so.1" MPSSHIM_TEST_KERNELS="$B/tests" \
    "$I/bin/mpsshim-run" "$B/tests/vecadd" 1000 2>&1)
echo "$out"
JOB3=$(grep -h "JobId=[0-9]*" -o "$S/slurmctld.log" | tail -n 1 | cut -d= -f2)
echo "$out" | grep -q '^PASS vecadd' && ! echo "$out" | grep -q 'running directly' &&
    ok own-server-served || bad own-server-served "job $JOB3: $out"
job3_servers() {
    local e
    for e in /proc/[0-9]*/environ; do
        tr '\0' '\n' 2>/dev/null <"$e" | grep -qxF "SLURM_JOB_ID=$JOB3" &&
            [ "$(cat "${e%/environ}/comm" 2>/dev/null)" = mpsshim-server ] && {
            e=${e%/environ}
            echo "${e#/proc/}"
        }
    done
}
for _ in $(seq 100); do idle && [ -z "$(job3_servers)" ] && break; sleep 0.1; done
left=$(job3_servers)
[ -z "$left" ] && ok own-server-stopped || {
    bad own-server-stopped "job $JOB3's own server still runs: $left"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
}

DONE=1
say "$([ $FAILED = 0 ] && echo 'slurm: all passed' || echo 'slurm: FAILED')"
exit $FAILED
