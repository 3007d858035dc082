#!/usr/bin/env bash
# MPSSHIM_SERVER_PER_GPU=1 (interpose/conn.c): one pipe directory, and a client whose
# CUDA_VISIBLE_DEVICES names one GPU is served by that GPU's own server, in the folder
# gpu-VALUE, which the client starts there; a client that sees several GPUs (or all) by the
# pipe directory's own server. The checks:
# 1. a client of GPU 1 loops vec_add (every round checked) while a client of GPU 0 faults:
#    each started its GPU's server; GPU 0's server saw the fault, GPU 1's client passed every
#    round and its server saw none (the driver's fault is the process's: tests/fault.sh);
# 2. those servers have their own pipe folders and logs (gpu-0, gpu-1 in the log directory),
#    and no server was started in the pipe directory itself;
# 3. the client's CUDA_VISIBLE_DEVICES is not applied again by its GPU's server: it sees one
#    device, that GPU (its UUID and PCI bus; the CPU test driver applies a value of one index
#    as the driver does);
# 4. clients that see two devices, or none named, go to the pipe directory's own server; so
#    does a value that cannot name a folder (".."), which that server applies as the driver
#    would (no device);
# 5. one `get_server_list` to the pipe directory lists every server there, one `quit` stops
#    them all (never through a link named like a GPU's folder); with only GPUs' servers
#    running, both do the same and any other command is refused, saying where they are;
# 6. (run before 5) physical memory exported as a POSIX descriptor through GPU 0's server is
#    imported through GPU 1's, and reads back (GPU 0's server was asked, its log keeps no
#    secret); so is a legacy IPC handle of 4 MiB, written both ways, and let go of when its
#    opener leaves it open; one of 1 MiB does not cross: its open answers
#    CUDA_ERROR_INVALID_VALUE and the server's log says why; through one server all open
#    (and natively, on a GPU);
# 7. (run before 5) with MPSSHIM_SERVER_PER_GPU_MOVE=1, a client that sees both GPUs moves to
#    its GPU's server at its first context: device 1's runs on through device 0's fault, the
#    process still sees both and answers peer queries as the pipe directory's server does,
#    NCCL's calls (ncclish) pass between two such ranks; a process that uses both devices is
#    served by both GPUs' servers (twogpus, with a library too, and a CUDA runtime program,
#    give one server's output), its own fault on device 0 leaves its device 1 working, and
#    device 1's server's end its device 0 working;
# 8. (run before 5) control commands reach the GPUs' servers through the pipe directory;
# 9. (run before 5) each GPU's server gives addresses in an address zone of its own;
# 10. (run before 5) the pipe directory's own server of moving clients makes contexts at
#     first use only;
# 11. (run before 5) the default, neither setting set: a pipe directory's server of both GPUs
#     has its clients move, those that see both and those bound to one by
#     CUDA_VISIBLE_DEVICES, and device 1's runs on through device 0's fault; one that asks
#     about peer access before its first context stays; a pipe
#     directory's server of one GPU, or one told MPSSHIM_SERVER_PER_GPU=0, keeps its clients.
# usage: server_per_gpu.sh BUILD_DIR WORK_DIR
set -u
B=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
needs_two_devices server_per_gpu
W=$2/server_per_gpu
rm -rf "$W"
fail() {
    echo "FAIL: $*"
    exit 1
}
P=$W/pipe
mkdir -p "$P"
chmod 700 "$P"
# Steps 1-6 as a pipe directory with MPSSHIM_SERVER_PER_GPU=1 alone always was: clients that
# see several GPUs stay (MOVE 0; step 7 sets it, step 11 leaves both to their defaults).
export MPSSHIM_PIPE_DIRECTORY=$P MPSSHIM_SERVER_PER_GPU=1 MPSSHIM_SERVER_PER_GPU_MOVE=0
unset MPSSHIM_LOG_DIRECTORY CUDA_MPS_LOG_DIRECTORY
LOG=$P/log
# on VISIBLE CMD...: CMD through the shim with CUDA_VISIBLE_DEVICES=VISIBLE ("-": unset).
on() {
    local v=$1
    shift
    if [ "$v" = - ]; then
        env -u CUDA_VISIBLE_DEVICES LD_PRELOAD="$SHIM" "$@"
    else
        env CUDA_VISIBLE_DEVICES="$v" LD_PRELOAD="$SHIM" "$@"
    fi
}
# pids: the servers' pids of the pipe directory and of its GPUs' folders (not of links).
pids() {
    local d
    cat "$P/server.pid" 2>/dev/null
    for d in "$P"/gpu-*; do
        [ -d "$d" ] && [ ! -L "$d" ] && cat "$d/server.pid" 2>/dev/null
    done
}
all_gone() {
    local p
    for p in $PIDS; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
}
trap 'printf "quit\n" | "$CTL" >/dev/null 2>&1' EXIT

# 1. Two GPUs' servers, started by their clients; a fault on one.
on 1 "$B/tests/fault" --steady 4 >"$W/steady.log" 2>&1 &
steady=$!
wait_for 30 grep -q "^ready" "$W/steady.log" || { cat "$W/steady.log"; fail "GPU 1's client never got ready"; }
on 0 "$B/tests/fault" >"$W/faulter.log" 2>&1 || { cat "$W/faulter.log"; fail "GPU 0's faulting client"; }
wait "$steady" || { cat "$W/steady.log"; fail "GPU 1's client did not pass every round through GPU 0's fault"; }
grep -q "Device 0: .* in the shared context" "$LOG/gpu-0/server.log" 2>/dev/null ||
    fail "GPU 0's server did not see its fault (log: $(ls "$LOG" 2>&1))"
! grep -q "in the shared context" "$LOG/gpu-1/server.log" || fail "GPU 1's server saw a fault"
echo "ok: GPU 1's client ran on through GPU 0's fault ($(grep -c . "$W/steady.log") lines), each GPU its own server"

# 2. Their folders; none in the pipe directory itself.
for g in 0 1; do
    [ -S "$P/gpu-$g/server.sock" ] || [ -n "$(ls "$P/gpu-$g" 2>/dev/null)" ] || fail "no folder gpu-$g"
    [ -s "$LOG/gpu-$g/server.log" ] || fail "no log of GPU $g's server"
done
[ -e "$P/server.pid" ] && fail "a server was started in the pipe directory itself"
on 0 "$B/tests/vecadd" 1000 >"$W/after.log" 2>&1 || { cat "$W/after.log"; fail "a new client of GPU 0 after its fault"; }
echo "ok: gpu-0 and gpu-1 folders and logs; none in the pipe directory; GPU 0's server serves again"

# 3. The value is not applied again by the GPU's server.
on 1 "$B/tests/devices" >"$W/devices1.log" 2>&1 || { cat "$W/devices1.log"; fail "devices on GPU 1's server"; }
grep -q "^count 1$" "$W/devices1.log" || { cat "$W/devices1.log"; fail "GPU 1's client saw not one device"; }
ID1=$(env -u CUDA_VISIBLE_DEVICES LD_PRELOAD="$SHIM" "$B/tests/devices" | sed -n 's/^device 1 //p')
grep -q "^device 0 $ID1$" "$W/devices1.log" || { cat "$W/devices1.log"; fail "GPU 1's client's device 0 is not GPU 1 ($ID1)"; }
echo "ok: GPU 1's server showed its client one device, GPU 1"

# 4. The pipe directory's own server: several devices, none named, or no folder name.
for v in 0,1 -; do
    on "$v" "$B/tests/vecadd" 1000 >"$W/own.log" 2>&1 || { cat "$W/own.log"; fail "CUDA_VISIBLE_DEVICES=$v"; }
done
[ -s "$P/server.pid" ] || fail "no server in the pipe directory itself for clients of several GPUs"
[ -e "$P/gpu-0,1" ] && fail "a folder for several GPUs"
on .. "$B/tests/devices" >"$W/dots.log" 2>&1
grep -q "^init CUDA_ERROR_NO_DEVICE" "$W/dots.log" || { cat "$W/dots.log"; fail "CUDA_VISIBLE_DEVICES=.. gave a device"; }
[ -e "$P/gpu-.." ] && fail "a folder for '..'"
echo "ok: clients of several GPUs and of none named served by the pipe directory's own server; '..' no device, no folder"

# 6. Between GPUs' servers: physical memory by its POSIX descriptor is carried (NCCL's ranks
# share their buffers so: the importer's server fetches the driver's own descriptor from the
# exporter's, server/memory/ipcpeer.c). Through one server every kind opens, as natively.
across() { # across NAME PER_GPU ARGS...: ipc_across through the shim, its output in $W/NAME.log
    local name=$1 per=$2
    shift 2
    env -u CUDA_VISIBLE_DEVICES MPSSHIM_SERVER_PER_GPU="$per" LD_PRELOAD="$SHIM" \
        "$B/tests/ipc_across" "$@" >"$W/$name.log" 2>&1 || { cat "$W/$name.log"; fail "ipc_across $name"; }
}
across vmm 1 --vmm 0 1
grep -q "^B: import: CUDA_SUCCESS" "$W/vmm.log" && grep -q "^B: A's bytes read back" "$W/vmm.log" ||
    { cat "$W/vmm.log"; fail "physical memory of GPU 0's server imported through GPU 1's"; }
grep -q "Command: ipc_peer_export -> size" "$LOG/gpu-0/control.log" ||
    fail "GPU 0's server was not asked for the descriptor (control.log: $(tail -3 "$LOG/gpu-0/control.log" 2>&1))"
# Asked with a handle GPU 0's server never made (a guessed secret, a malformed one): refused,
# and still no argument in its log.
for args in "0123456789abcdef 1 00000000000000000000000000000000" "zz 1 00" "1 2"; do
    printf 'ipc_peer_export %s\n' "$args" | MPSSHIM_PIPE_DIRECTORY=$P/gpu-0 "$CTL" >"$W/peer.log" 2>&1 &&
        fail "ipc_peer_export $args: answered"
    grep -q "No such handle\|Usage" "$W/peer.log" || { cat "$W/peer.log"; fail "ipc_peer_export $args: not refused"; }
done
grep -q "ipc_peer_export [0-9a-z]" "$LOG"/gpu-*/control.log && fail "a handle's secret in a control log"
# A legacy IPC handle of 4 MiB crosses (GPU 0's server maps it on its own and passes that
# mapping's descriptor: server/memory/arena.c, ipc.c), both ways, and one left open by a
# departing opener is let go of; one of 1 MiB does not (its mapping holds other clients'
# blocks), said once.
across legacy 1 0 1
grep -q "^B: open: CUDA_ERROR_INVALID_VALUE" "$W/legacy.log" || { cat "$W/legacy.log"; fail "a legacy handle of 1 MiB of GPU 0's server opened through GPU 1's"; }
grep -q "an IPC handle of memory no server of this pipe directory can pass" "$LOG/gpu-1/server.log" ||
    fail "GPU 1's server did not say why it refused the handle"
across legacybig 1 --big 0 1
grep -q "^B: A's bytes read back" "$W/legacybig.log" && grep -q "^A: B's writes seen" "$W/legacybig.log" ||
    { cat "$W/legacybig.log"; fail "a legacy handle of 4 MiB of GPU 0's server, through GPU 1's"; }
across legacyleave 1 --big --leave 0 1
grep -q "^A: B's writes seen" "$W/legacyleave.log" || { cat "$W/legacyleave.log"; fail "a legacy handle left open"; }
# A mirror of a block's whole 2 MiB slab (server/memory/mirror.c) goes to a sibling server
# only: a client asking GPU 0's server itself, with the handle's own secret and its exporter's
# pid, is refused (the slab holds other clients' blocks); and only for its exporter's process
# (tests/unit/rawmirror.c).
rm -f "$W/holder.in"
mkfifo "$W/holder.in"
on 0 "$B/tests/ipc_across" --handle 0 <"$W/holder.in" >"$W/holder.log" 2>&1 &
holder=$!
exec 8>"$W/holder.in"
wait_for 30 grep -q "^pid " "$W/holder.log" || { cat "$W/holder.log"; fail "the handle's holder"; }
read -r nonce id secret < <(sed -n 's/^handle //p' "$W/holder.log" | python3 -c '
import sys; b = bytes.fromhex(sys.stdin.read().strip())
print(b[8:16][::-1].hex(), int.from_bytes(b[16:24], "little"), b[32:48].hex())')
hpid=$(sed -n 's/^pid //p' "$W/holder.log")
asked=$(printf 'ipc_peer_mirror %s %s %s %s\n' "$nonce" "$id" "$secret" "$hpid" | MPSSHIM_PIPE_DIRECTORY=$P/gpu-0 "$CTL" 2>&1)
# ... and a client of GPU 1's server asking it for a mirror of that process's memory, with the
# handle as it is and forged, is refused (the sibling gives a mirror for its exporter alone).
MPSSHIM_PIPE_DIRECTORY=$P/gpu-1 "$B/tests/unit/rawclient" mirror "$(sed -n 's/^handle //p' "$W/holder.log")" \
    >"$W/rawmirror.log" 2>&1 || { cat "$W/rawmirror.log"; fail "a mirror of another process's memory, asked by hand"; }
echo go >&8
exec 8>&-
wait "$holder" || { cat "$W/holder.log"; fail "the handle's holder"; }
[ "$asked" = "No such handle" ] || fail "a client asking for a mirror itself was answered: '$asked'"
# An interprocess event crosses (GPU 0's server made it interprocess and passes the driver's
# own handle of it; the log shows only "event" of that answer): not ready before its record
# is released, then waited for by a stream and synchronised with, through GPU 1's server.
event_ok() {
    grep -q "^B: open event: CUDA_SUCCESS" "$1" && grep -q "^B: before its release: CUDA_ERROR_NOT_READY" "$1" &&
        grep -q "^B: a stream's wait: CUDA_SUCCESS" "$1" && grep -q "^B: after: CUDA_SUCCESS, CUDA_SUCCESS" "$1"
}
across event 1 --event 0 1
event_ok "$W/event.log" || { cat "$W/event.log"; fail "an IPC event of GPU 0's server, through GPU 1's"; }
grep -q "Command: ipc_peer_export -> event$" "$LOG/gpu-0/control.log" ||
    fail "GPU 0's server did not pass the event (control.log: $(tail -3 "$LOG/gpu-0/control.log" 2>&1))"
grep -q "ipc_peer_export -> event [0-9a-f]" "$LOG"/gpu-*/control.log && fail "an event's handle in a control log"
on 1 "$B/tests/vecadd" 1000 >/dev/null 2>&1 || fail "GPU 1's server after its client left a handle open"
passed() { if [ "$1" = --event ]; then event_ok "$2"; else grep -q "^B: A's bytes read back" "$2"; fi; }
for mode in "" --vmm --big --event; do
    across one 0 $mode 0 1
    passed "$mode" "$W/one.log" || { cat "$W/one.log"; fail "IPC$mode through one server"; }
    if [ -n "$GPU" ]; then
        "$B/tests/ipc_across" $mode 0 1 >"$W/native.log" 2>&1 && passed "$mode" "$W/native.log" ||
            { cat "$W/native.log"; fail "ipc_across$mode natively"; }
    fi
done
echo "ok: between GPUs' servers a descriptor of physical memory, a legacy IPC handle of 4 MiB and an IPC event carried, a handle of 1 MiB refused (said in the log); through one server all"

# 7. With MPSSHIM_SERVER_PER_GPU_MOVE=1 clients that see both GPUs move to their GPU's server
# at their first context: a client of device 1 runs on through a fault of a client of device
# 0, both seeing every device; they went to the folders gpu-1 and gpu-0 (those of clients
# bound by CUDA_VISIBLE_DEVICES); such a process still sees both devices, answers peer
# queries as the pipe directory's server does, and NCCL's calls (ncclish) pass between two
# such ranks; a context on a second device is served by that device's server, below.
# (Without it they stay: step 4.)
export MPSSHIM_SERVER_PER_GPU_MOVE=1
on - "$B/tests/fault" --other 4 >"$W/moved-other.log" 2>&1 &
other=$!
wait_for 30 grep -q "^ready" "$W/moved-other.log" || { cat "$W/moved-other.log"; fail "device 1's client (every device seen) never got ready"; }
on - "$B/tests/fault" >"$W/moved-faulter.log" 2>&1 || { cat "$W/moved-faulter.log"; fail "device 0's faulting client (every device seen)"; }
wait "$other" || { cat "$W/moved-other.log"; fail "device 1's client (every device seen) did not pass every round through device 0's fault"; }
for g in 0 1; do
    grep -q "served here for its device $g of 2, moved" "$LOG/gpu-$g/server.log" ||
        fail "device $g's client did not move to gpu-$g's server"
done
on - "$B/tests/devices" >"$W/moved-devices.log" 2>&1 && grep -q "^count 2$" "$W/moved-devices.log" ||
    { cat "$W/moved-devices.log"; fail "a moved client saw not both devices"; }
# Its peer queries answer what the pipe directory's server answers (interpose/moved.c), so
# NCCL's ranks (ncclish) take P2P between the GPUs' servers, their memory passed as
# descriptors (server/memory/ipcpeer.c); their grants of access to the other device dropped;
# each is told its peer's memory lies on the peer's device (the properties its descriptor
# carried: interpose/physical.c).
on - "$B/tests/devices" peers >"$W/moved-peers.log" 2>&1 || { cat "$W/moved-peers.log"; fail "a moved client's peer queries"; }
MPSSHIM_SERVER_PER_GPU_MOVE=0 on - "$B/tests/devices" peers >"$W/stayed-peers.log" 2>&1 || { cat "$W/stayed-peers.log"; fail "peer queries through the pipe directory's server"; }
grep -q "^peer 0 1: CUDA_SUCCESS 1" "$W/stayed-peers.log" || { cat "$W/stayed-peers.log"; fail "the pipe directory's server: no peer access between the devices"; }
diff "$W/stayed-peers.log" "$W/moved-peers.log" || fail "a moved client's peer answers differ from the pipe directory's server's"
grep -q "served here for its device 0 of 2, moved" "$LOG/gpu-0/server.log" || fail "the peer queries' client did not move"
moves() { grep -c "served here for its device $1 of 2, moved" "$LOG/gpu-$1/server.log"; }
before="$(moves 0) $(moves 1)"
on - "$B/tests/ncclish" --vmm-only >"$W/moved-ncclish.log" 2>&1 && grep -q "^PASS ncclish" "$W/moved-ncclish.log" ||
    { cat "$W/moved-ncclish.log"; fail "NCCL's calls (ncclish) between moved ranks"; }
[ "$(moves 0) $(moves 1)" = "$(echo "$before" | awk '{print $1 + 1, $2 + 1}')" ] || fail "ncclish's ranks did not move, one to each GPU's server"
# A moved process that uses both devices is served by both GPUs' servers, one connection
# each (interpose/route.c): each device's work goes to its own (twogpus: streams, events and
# memory of one device named with the other's context current; pinned memory made through
# device 0's server copied on device 1's), with the output of one server; and its own fault
# on device 0 leaves its device 1 working, where natively, and through one server, the
# process's fault reaches every device (tests/fault.sh).
MPSSHIM_SERVER_PER_GPU_MOVE=0 on - "$B/tests/twogpus" >"$W/one-twogpus.log" 2>&1 ||
    { cat "$W/one-twogpus.log"; fail "twogpus through the pipe directory's server"; }
before="$(moves 0) $(moves 1)"
on - "$B/tests/twogpus" >"$W/moved-twogpus.log" 2>&1 || { cat "$W/moved-twogpus.log"; fail "twogpus through both GPUs' servers"; }
diff "$W/one-twogpus.log" "$W/moved-twogpus.log" || fail "twogpus through both GPUs' servers: not the output of one server"
[ "$(moves 0) $(moves 1)" = "$(echo "$before" | awk '{print $1 + 1, $2 + 1}')" ] || fail "twogpus was not served by both GPUs' servers"
# A library (what the CUDA runtime loads a program's kernels as) and its kernels are loaded
# again by the second GPU's server from the image the shim kept (interpose/replicas.c): the
# driver-API program with a library, and a CUDA runtime program using both devices apart
# (tests/cudart/twogpus: kernels, each device's own __device__ table), give one server's
# output through both GPUs' servers; so do a thread per device at once (each connection's
# lanes, ring and staging slots: twogpus --threads), a host function on each device's
# stream launched with the other's context current (each connection's callback thread), and
# device 1's stream waiting for device 0's event (an interprocess twin: interpose/across.c),
# each device's own physical memory mapped with access for it (its grant goes to its own
# server: interpose/moved.c), and device 0's granted to device 1 too, read by device 1's
# kernel and copied on its stream (mapped in device 1's server: interpose/mirror.c), and
# device 0's physical memory handed to device 1 as a handle that device 1 maps itself (NCCL's
# ranks in one process: an import of it in device 1's server, interpose/physical.c), and a
# process whose second thread asked about the devices before the first context, and waits
# for nothing when it is made (JAX's threads do so: the process moves all the same), and one
# whose first context is device 1's granting device 1 access to device 0's physical memory
# (XLA grants every peer: the grant goes to device 1's server, interpose/moved.c), and
# graphs captured on each device handled with the other's context current (interpose/owned.c).
for prog in "twogpus --library" "cudart/twogpus" "twogpus --threads 30" "twogpus --hostfn" "twogpus --events" "twogpus --vmm" "twogpus --vmmpeer" "twogpus --p2pmap" "twogpus --early-thread" "twogpus --device1-first --vmmpeer" "twogpus --graphs"; do
    f=$W/moved-${prog//[ \/]/_}
    # shellcheck disable=SC2086 # the program and its flags
    MPSSHIM_SERVER_PER_GPU_MOVE=0 on - $B/tests/$prog >"$f.one" 2>&1 || { cat "$f.one"; fail "$prog through the pipe directory's server"; }
    before="$(moves 0) $(moves 1)"
    # shellcheck disable=SC2086
    on - $B/tests/$prog >"$f.two" 2>&1 || { cat "$f.two"; fail "$prog through both GPUs' servers"; }
    diff "$f.one" "$f.two" || fail "$prog through both GPUs' servers: not the output of one server"
    [ "$(moves 0) $(moves 1)" = "$(echo "$before" | awk '{print $1 + 1, $2 + 1}')" ] || fail "$prog was not served by both GPUs' servers"
done
# Memory between the two GPUs' servers (interpose/mirror.c, server/memory/mirror.c): peer
# access enabled between their contexts (its errors, a kernel of device 1 reading device 0's
# memory, ending with its context) and copies between their memory, on streams ordered by
# each other's events, give one server's output: the memory is mapped in the other server at
# its own address. (Forked processes of peer's move too: at least one move each.)
for prog in peer peer_events; do
    f=$W/moved-$prog
    MPSSHIM_SERVER_PER_GPU_MOVE=0 on - "$B/tests/$prog" >"$f.one" 2>&1 || { cat "$f.one"; fail "$prog through the pipe directory's server"; }
    read -r b0 b1 <<<"$(moves 0) $(moves 1)"
    on - "$B/tests/$prog" >"$f.two" 2>&1 || { cat "$f.two"; fail "$prog through both GPUs' servers"; }
    diff "$f.one" "$f.two" || fail "$prog through both GPUs' servers: not the output of one server"
    [ "$(moves 0)" -gt "$b0" ] && [ "$(moves 1)" -gt "$b1" ] || fail "$prog was not served by both GPUs' servers"
done
on - "$B/tests/fault" --device1 >"$W/moved-two.log" 2>&1 ||
    { cat "$W/moved-two.log"; fail "a moved client's fault on device 0 with device 1 in use"; }
grep -q "^device 1's context after device 0's fault: made current CUDA_SUCCESS, a round of vec_add CUDA_SUCCESS" "$W/moved-two.log" &&
    grep -q "^a context made on device 1 after it: CUDA_SUCCESS, cuMemAlloc there CUDA_SUCCESS" "$W/moved-two.log" ||
    { cat "$W/moved-two.log"; fail "a moved client's own fault on device 0 reached its device 1"; }
# Device 1's server ends (SIGKILL) under such a process: its next call there answers
# CUDA_ERROR_MPS_SERVER_NOT_READY at once (that connection's liveness), and its device 0 work
# goes on through device 0's server.
rm -f "$W/lose1.in"
mkfifo "$W/lose1.in"
on - "$B/tests/twogpus" --lose1 <"$W/lose1.in" >"$W/lose1.log" 2>&1 &
lost=$!
exec 7>"$W/lose1.in"
wait_for 30 grep -q "^started" "$W/lose1.log" || { cat "$W/lose1.log"; fail "twogpus --lose1 never started"; }
lost1=$(cat "$P/gpu-1/server.pid")
kill -9 "$lost1"
echo go >&7
exec 7>&-
wait "$lost" || { cat "$W/lose1.log"; fail "twogpus --lose1 after device 1's server ended"; }
grep -q "^device 1's stream synchronised: CUDA_ERROR_MPS_SERVER_NOT_READY" "$W/lose1.log" &&
    grep -q "^device 0 checksum" "$W/lose1.log" ||
    { cat "$W/lose1.log"; fail "device 1's server's end: device 1 not refused, or device 0 stopped"; }
export MPSSHIM_SERVER_PER_GPU_MOVE=0
# Step 8 starts GPU 1's server afresh: the killed one must have ended first (on a GPU its
# context's teardown takes a while after SIGKILL).
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
wait_for 60 gone "$lost1" || fail "GPU 1's server $lost1 still there 60 s after SIGKILL"
# ... and its lock free (on two H200s a server started 0.1 s after found it held: who held it
# is printed if it stays so).
lock_free() { flock -n "$P/gpu-1/server.lock" true; }
wait_for 60 lock_free || {
    ino=$(stat -c %i "$P/gpu-1/server.lock")
    for holder in $(awk -v i=":$ino$" '$6 ~ i {print $5}' /proc/locks); do
        echo "held by $holder: $(tr '\0' ' ' <"/proc/$holder/cmdline" 2>/dev/null)"
    done
    fail "GPU 1's server.lock still held 60 s after its server $lost1 ended"
}
echo "ok: clients that see both GPUs served by their GPUs' servers (MPSSHIM_SERVER_PER_GPU_MOVE): device 1's ran on through device 0's fault, one process's work on both went to both, and its own fault stayed on device 0"

# 8. (run before 5) Commands reach the GPUs' servers through the pipe directory
# (server/control/ctlgpus.c): one naming a GPU's server by its pid goes there, ps lists every
# server's clients under one header, get_client_info finds the client's server, the defaults
# reach every running server (a device by ordinal the folder gpu-<ordinal>'s), and a GPU's
# server started later takes them from the pipe directory's own (server/control/siblings.c).
# (Steps 4 and 7 left the pipe directory's server and both GPUs' running.) Step 7's clients
# of GPU 1's server are gone, but their release may still be under way: its list must hold
# the holding client alone (once seen with a departed client still on it, CI, 2026-11-30).
ctl1() { MPSSHIM_PIPE_DIRECTORY=$P/gpu-1 "$CTL"; }
gpu1_clients() { printf 'get_client_list %s\n' "$(cat "$P/gpu-1/server.pid")" | ctl1; }
gpu1_idle() { [ -z "$(gpu1_clients)" ]; }
wait_for 30 gpu1_idle || fail "GPU 1's server still lists step 7's clients: $(gpu1_clients | xargs)"
on 1 "$B/tests/hold" 600 >"$W/hold1.log" 2>&1 &
held=$!
wait_for 30 grep -q "^ready" "$W/hold1.log" || { cat "$W/hold1.log"; fail "GPU 1's holding client"; }
G1=$(cat "$P/gpu-1/server.pid")
H=$(printf 'get_client_list %s\n' "$G1" | "$CTL")
grep -q "tests/hold" "/proc/$H/cmdline" 2>/dev/null || {
    cat "$W/hold1.log"
    tail -n 5 "$LOG/gpu-1/control.log" "$LOG/gpu-1/server.log"
    fail "get_client_list of GPU 1's server $G1 through the pipe directory: '$H'"
}
printf 'ps\n' | "$CTL" >"$W/ps.log" || { cat "$W/ps.log"; fail "ps"; }
[ "$(grep -c '^PID ID SERVER' "$W/ps.log")" = 1 ] && grep -q "^$H [0-9]* $G1 " "$W/ps.log" ||
    { cat "$W/ps.log"; fail "ps: one header and GPU 1's server's client"; }
printf 'get_client_info %s\n' "$H" | "$CTL" >"$W/info.log" && grep -q "$H" "$W/info.log" ||
    { cat "$W/info.log"; fail "get_client_info of a GPU's server's client"; }
printf 'set_active_thread_percentage %s 30\n' "$G1" | "$CTL" | grep -qx "30.0" &&
    printf 'get_active_thread_percentage %s\n' "$G1" | ctl1 | grep -qx "30.0" ||
    fail "set_active_thread_percentage of GPU 1's server through the pipe directory"
printf 'set_default_active_thread_percentage 60\nset_default_device_pinned_mem_limit 1 256M\n' | "$CTL" >"$W/defaults.log" ||
    { cat "$W/defaults.log"; fail "the defaults through the pipe directory"; }
[ "$(printf 'get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n' | ctl1 | tr '\n' ' ')" = "60.0 256M " ] ||
    fail "GPU 1's server did not take the defaults"
[ "$(printf 'get_default_device_pinned_mem_limit 0\n' | MPSSHIM_PIPE_DIRECTORY=$P/gpu-0 "$CTL")" = 0 ] ||
    fail "GPU 0's server took GPU 1's memory limit"
printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY=$P/gpu-0 "$CTL" >/dev/null 2>&1
on 0 "$B/tests/vecadd" 1000 >/dev/null 2>&1 || fail "GPU 0's server started again"
[ "$(printf 'get_default_active_thread_percentage\n' | MPSSHIM_PIPE_DIRECTORY=$P/gpu-0 "$CTL")" = 60.0 ] &&
    grep -q "Took the default active thread percentage 60.0 from the pipe directory's server" "$LOG/gpu-0/server.log" ||
    fail "a GPU's server started later did not take the pipe directory's defaults"
printf 'terminate_client %s %s\n' "$G1" "$H" | "$CTL" >"$W/terminate.log" 2>&1 || { cat "$W/terminate.log"; fail "terminate_client through the pipe directory"; }
[ -z "$(printf 'get_client_list %s\n' "$G1" | "$CTL")" ] || fail "terminate_client: GPU 1's server still lists its client"
kill "$H" 2>/dev/null
wait "$held" 2>/dev/null
printf 'set_default_active_thread_percentage 100\nset_default_device_pinned_mem_limit 1 0\n' | "$CTL" >/dev/null
echo "ok: commands naming GPU 1's server by pid, ps, get_client_info and the defaults reach the GPUs' servers; a GPU's server started later takes the defaults"

# 9. (run before 5) Each GPU's server places what it gives addresses to in an address zone of
# its own (server/core/zone.c), so that a process holding addresses of both never finds one
# twice: its arena's 256 MiB, pinned host memory and a reservation of 1 GiB that names no
# address lie in the zone its log names, a different one for each GPU's server (left to the
# driver, two servers' first reservations coincide: on an H200 both at 0x302000000), and so
# does a block of 1 MiB, in a slab of 2 MiB carved from a chunk of the zone (the driver
# takes no hint for 2 MiB: zone.c); the two servers' blocks differ.
zone_of() { grep -o "Address zone [0-9]* of the pipe directory's servers: device addresses from 0x[0-9a-f]*, host window at 0x[0-9a-f]*" "$LOG/gpu-$1/server.log" | tail -n 1; }
for g in 0 1; do
    on "$g" "$B/tests/devices" addrs >"$W/addrs-$g.log" 2>&1 && grep -q "^addrs " "$W/addrs-$g.log" ||
        { cat "$W/addrs-$g.log"; fail "GPU $g's client: its addresses"; }
    z=$(zone_of "$g")
    [ -n "$z" ] || fail "GPU $g's server logged no address zone"
    read -r n dev win < <(echo "$z" | awk '{print $3, $12, $16}' | tr -d ',')
    read -r big small host resv < <(awk '/^addrs / {print $3, $5, $7, $9}' "$W/addrs-$g.log")
    for a in "$big" "$small" "$resv"; do
        (( a >= dev && a < dev + (2 << 40) )) || fail "GPU $g's server (zone $n) gave device address $a outside $dev + 2 TiB"
    done
    (( host >= win && host < win + (1 << 40) )) || fail "GPU $g's server (zone $n) gave host address $host outside $win + 1 TiB"
    eval "zone$g=$n small$g=$small"
done
# shellcheck disable=SC2154 # zone0, zone1, small0 and small1 are set by eval above
[ "$zone0" != "$zone1" ] || fail "GPU 0's and GPU 1's servers share address zone $zone0"
# shellcheck disable=SC2154
[ "$small0" != "$small1" ] || fail "GPU 0's and GPU 1's servers gave the same block of 1 MiB, $small0"
echo "ok: GPU 0's and GPU 1's servers give addresses in zones $zone0 and $zone1: device memory, pinned host memory and reservations"

# 10. (run before 5) The pipe directory's own server, started by a client that moves
# (MPSSHIM_SERVER_PER_GPU_MOVE=1 in its environment), makes no context at start
# (MPSSHIM_SERVER_CONTEXTS's auto: server/core/devctx.c): moved processes that use both GPUs,
# or ask device queries and the module loading mode before their first context, leave it with none, so each GPU holds its own server's context alone; a process that stays
# (ctxless_node loads a library before its first context) has its device's made at first
# use, that device's only; the GPUs' servers make theirs at start.
L=$W/lazy
mkdir -p "$L"
chmod 700 "$L"
lazy() { MPSSHIM_PIPE_DIRECTORY=$L MPSSHIM_SERVER_PER_GPU_MOVE=1 on - "$@"; }
lazy "$B/tests/twogpus" >"$W/lazy-twogpus.log" 2>&1 || { cat "$W/lazy-twogpus.log"; fail "twogpus moved, the pipe directory's server started by it"; }
lazy "$B/tests/twogpus" --vmmpeer >>"$W/lazy-twogpus.log" 2>&1 || { cat "$W/lazy-twogpus.log"; fail "twogpus --vmmpeer moved"; }
lazy "$B/tests/devices" peers >>"$W/lazy-twogpus.log" 2>&1 || { cat "$W/lazy-twogpus.log"; fail "devices peers moved"; }
[ "$(grep -c "its shared context made at first use" "$L/log/server.log")" -ge 2 ] ||
    fail "the pipe directory's server of moving clients made contexts at start: $(grep 'Device' "$L/log/server.log")"
grep -q "made at its first use" "$L/log/server.log" && fail "moved processes made a context in the pipe directory's server: $(grep 'first use' "$L/log/server.log")"
for g in 0 1; do
    grep -q "one shared context (made in" "$L/log/gpu-$g/server.log" || fail "GPU $g's server made no context at start"
done
printf 'get_server_status %s\n' "$(cat "$L/server.pid")" | MPSSHIM_PIPE_DIRECTORY=$L "$CTL" >"$W/lazy-status.log" 2>&1
[ "$(grep -c "no shared context made yet" "$W/lazy-status.log")" = 2 ] || { cat "$W/lazy-status.log"; fail "status: the pipe directory's server's contexts"; }
lazy "$B/tests/ctxless_node" >"$W/lazy-stays.log" 2>&1 || { cat "$W/lazy-stays.log"; fail "a process that stays, its context made at first use"; }
grep -q "staying with the pipe directory's server" "$W/lazy-stays.log" || fail "ctxless_node did not stay"
[ "$(grep -c "Device 0: one shared context, made at its first use" "$L/log/server.log")" = 1 ] &&
    ! grep -q "Device 1: one shared context, made" "$L/log/server.log" ||
    fail "the process that stayed: not device 0's context alone made at first use: $(grep 'first use' "$L/log/server.log")"
printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY=$L "$CTL" >/dev/null 2>&1
echo "ok: the pipe directory's server of moving clients made no context for them, device 0's at first use for one that stayed"

# 11. (run before 5) The default: neither setting set (both "auto"). The pipe directory's own
# server, of both GPUs, makes no context at start and tells its clients to move
# (CHAN_WELCOME_MOVES: server/core/devctx.c, interpose/conn.c): a client that sees both GPUs
# and one bound to GPU 1 by CUDA_VISIBLE_DEVICES move to their GPU's server, so device 1's
# runs on through device 0's fault, as under MPS. A pipe directory's server of one GPU
# (started with CUDA_VISIBLE_DEVICES=0) keeps its clients, its context made at start, and so
# does one started with MPSSHIM_SERVER_PER_GPU=0 (what every other script sets: tests/lib.sh),
# or with a CUDA_VISIBLE_DEVICES of its own.
dflt() { # dflt PIPE_DIR VISIBLE CMD...: CMD as `on` runs it, both settings unset
    (
        unset MPSSHIM_SERVER_PER_GPU MPSSHIM_SERVER_PER_GPU_MOVE
        export MPSSHIM_PIPE_DIRECTORY=$1
        shift
        on "$@"
    )
}
D=$W/default
mkdir -p "$D" "$W/default1" "$W/default0"
chmod 700 "$D" "$W/default1" "$W/default0"
dflt "$D" - "$B/tests/fault" --other 4 >"$W/default-other.log" 2>&1 &
other=$!
wait_for 30 grep -q "^ready" "$W/default-other.log" || { cat "$W/default-other.log"; fail "by default: device 1's client never got ready"; }
dflt "$D" - "$B/tests/fault" >"$W/default-faulter.log" 2>&1 || { cat "$W/default-faulter.log"; fail "by default: device 0's faulting client"; }
wait "$other" || { cat "$W/default-other.log"; fail "by default: device 1's client (both devices seen) did not pass every round through device 0's fault"; }
dflt "$D" 1 "$B/tests/vecadd" 1000 >"$W/default-bound.log" 2>&1 || { cat "$W/default-bound.log"; fail "by default: a client bound to GPU 1"; }
grep -q "Clients move to their GPUs' own servers" "$D/log/server.log" || fail "by default: the pipe directory's server of both GPUs did not say its clients move"
grep -q "made at its first use" "$D/log/server.log" && fail "by default: a context made in the pipe directory's server: $(grep 'first use' "$D/log/server.log")"
grep -q "served here for its device 0 of 1, moved" "$D/log/gpu-1/server.log" || fail "by default: the client bound to GPU 1 did not move to gpu-1's server"
grep -q "served here for its device 1 of 2, moved" "$D/log/gpu-1/server.log" && grep -q "served here for its device 0 of 2, moved" "$D/log/gpu-0/server.log" ||
    fail "by default: the clients that see both GPUs did not move to their GPUs' servers"
# A process that asks about peer access before its first context (pool_peer: device 1's
# kernels write device 0's pool memory) stays, served whole by the pipe directory's server,
# its context made there at first use; its child, which uses device 0 alone, moves and reads
# its own pool's access for device 1 (none). One that uses device 0 and gives device 1 access
# to its pools (mempool) moves, the access kept by its shim (interpose/moved.c).
dflt "$D" - "$B/tests/pool_peer" >"$W/default-poolpeer.log" 2>&1 || { cat "$W/default-poolpeer.log"; fail "by default: pool_peer"; }
grep -q "made at its first use" "$D/log/server.log" ||
    fail "by default: pool_peer, which asks about peer access first, did not stay with the pipe directory's server"
dflt "$D" - "$B/tests/mempool" >"$W/default-mempool.log" 2>&1 || { cat "$W/default-mempool.log"; fail "by default: mempool"; }
# ... and it is then refused a context on device 1, where its pool's memory is not, until
# the pool is destroyed (natively both succeed).
dflt "$D" - "$B/tests/mempool" --then-other >"$W/default-then.log" 2>&1 || { cat "$W/default-then.log"; fail "by default: mempool --then-other"; }
grep -q "^device 1's access to the pool: 3$" "$W/default-then.log" &&
    grep -q "^a context on device 1 with the pool's access given: CUDA_ERROR_INVALID_DEVICE$" "$W/default-then.log" &&
    grep -q "^a context on device 1 once the pool is destroyed: CUDA_SUCCESS$" "$W/default-then.log" &&
    grep -q "it gave a memory pool's access to another GPU" "$W/default-then.log" ||
    { cat "$W/default-then.log"; fail "by default: a context on the GPU a pool gave access to, before and after the pool's end"; }
grep -q "mpsshim:" "$W/default-poolpeer.log" "$W/default-mempool.log" && fail "by default: a word of the shim's: $(grep -h 'mpsshim:' "$W/default-poolpeer.log" "$W/default-mempool.log")"
printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY=$D "$CTL" >/dev/null 2>&1
# A client that may not start servers (MPSSHIM_AUTOSTART=0) moves only to a GPU's server
# already there: none is (quit above), so it stays, at once and without a word, however long
# it would wait for a server (MPSSHIM_SERVER_WAIT).
(unset MPSSHIM_SERVER_PER_GPU MPSSHIM_SERVER_PER_GPU_MOVE; MPSSHIM_PIPE_DIRECTORY=$D "$CTL" -d) || fail "the default pipe directory's server again"
t0=$SECONDS
MPSSHIM_AUTOSTART=0 MPSSHIM_SERVER_WAIT=30 dflt "$D" - "$B/tests/vecadd" 1000 >"$W/default-noauto.log" 2>&1 || { cat "$W/default-noauto.log"; fail "by default, MPSSHIM_AUTOSTART=0: a client"; }
[ $((SECONDS - t0)) -lt 20 ] || fail "by default, MPSSHIM_AUTOSTART=0: the client waited $((SECONDS - t0)) s for a GPU's server"
grep -q "staying" "$W/default-noauto.log" && fail "by default, MPSSHIM_AUTOSTART=0: the client said it stayed: $(grep staying "$W/default-noauto.log")"
ls -d "$D"/gpu-* >/dev/null 2>&1 && [ -e "$D/gpu-0/server.pid" ] && kill -0 "$(cat "$D/gpu-0/server.pid")" 2>/dev/null &&
    fail "by default, MPSSHIM_AUTOSTART=0: a GPU's server was started"
printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY=$D "$CTL" >/dev/null 2>&1
mkdir -p "$W/defaultv"
chmod 700 "$W/defaultv"
(unset MPSSHIM_SERVER_PER_GPU MPSSHIM_SERVER_PER_GPU_MOVE; MPSSHIM_PIPE_DIRECTORY=$W/default1 CUDA_VISIBLE_DEVICES=0 "$CTL" -d) || fail "a pipe directory's server of one GPU"
(export MPSSHIM_PIPE_DIRECTORY=$W/default0; unset MPSSHIM_SERVER_PER_GPU_MOVE; MPSSHIM_SERVER_PER_GPU=0 "$CTL" -d) || fail "a pipe directory's server told MPSSHIM_SERVER_PER_GPU=0"
# Started with a CUDA_VISIBLE_DEVICES of its own (as a Slurm prolog starts a job's), a
# server of both GPUs numbers them otherwise than the machine may: its clients stay.
(unset MPSSHIM_SERVER_PER_GPU MPSSHIM_SERVER_PER_GPU_MOVE; MPSSHIM_PIPE_DIRECTORY=$W/defaultv CUDA_VISIBLE_DEVICES=0,1 "$CTL" -d) || fail "a pipe directory's server of CUDA_VISIBLE_DEVICES=0,1"
grep -q "Clients stay with this server of 2 GPUs" "$W/defaultv/log/server.log" || fail "defaultv: its server did not say its clients stay"
for d in default1 default0 defaultv; do
    dflt "$W/$d" - "$B/tests/vecadd" 1000 >"$W/$d-client.log" 2>&1 || { cat "$W/$d-client.log"; fail "$d: a client"; }
    grep -q "one shared context (made in" "$W/$d/log/server.log" || fail "$d: its server made no context at start"
    grep -q "Clients move" "$W/$d/log/server.log" && fail "$d: its server told its clients to move"
    ls -d "$W/$d"/gpu-* >/dev/null 2>&1 && fail "$d: a GPU's server started: $(ls -d "$W/$d"/gpu-*)"
    printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY=$W/$d "$CTL" >/dev/null 2>&1
done
echo "ok: by default a pipe directory's server of both GPUs had its clients move (both devices seen, or one by CUDA_VISIBLE_DEVICES): device 1's client ran on through device 0's fault; with MPSSHIM_AUTOSTART=0 and no GPU's server, one stayed at once; one of one GPU, told MPSSHIM_SERVER_PER_GPU=0 or started with CUDA_VISIBLE_DEVICES=0,1 kept its clients"

# 5. One list and one quit for all; then with only the GPUs' servers. A file and a link named
# like a GPU's folder are passed over (the link to another pipe directory with a server).
touch "$P/gpu-file"
mkdir -p "$W/elsewhere"
chmod 700 "$W/elsewhere"
MPSSHIM_PIPE_DIRECTORY=$W/elsewhere "$CTL" -d || fail "a server elsewhere"
OTHER=$(cat "$W/elsewhere/server.pid")
ln -s "$W/elsewhere" "$P/gpu-link"
PIDS=$(pids)
[ "$(echo "$PIDS" | wc -w)" = 3 ] || fail "not 3 servers: $PIDS"
listed=$(printf 'get_server_list\n' | "$CTL" | sort -n | tr '\n' ' ')
[ "$listed" = "$(echo "$PIDS" | sort -n | tr '\n' ' ')" ] || fail "get_server_list: $listed, not $PIDS"
printf 'quit\n' | "$CTL" >"$W/quit.log" 2>&1 || { cat "$W/quit.log"; fail "quit"; }
wait_for 15 all_gone || fail "quit left servers running: $PIDS"
on 0 "$B/tests/vecadd" 1000 >/dev/null 2>&1 || fail "GPU 0's server again"
on 1 "$B/tests/vecadd" 1000 >/dev/null 2>&1 || fail "GPU 1's server again"
PIDS=$(pids)
listed=$(printf 'get_server_list\n' | "$CTL" | sort -n | tr '\n' ' ')
[ "$listed" = "$(echo "$PIDS" | sort -n | tr '\n' ' ')" ] || fail "get_server_list (GPUs' servers only): $listed, not $PIDS"
printf 'get_default_active_thread_percentage\n' | "$CTL" >"$W/refused.log" 2>&1 && fail "a command that names no server, with only GPUs' servers"
grep -q "only in its GPUs' folders" "$W/refused.log" || { cat "$W/refused.log"; fail "no word of where the servers are"; }
printf 'get_server_status\nps\n' | "$CTL" >"$W/status.log" 2>&1 && [ "$(grep -c '^Server ' "$W/status.log")" = 2 ] &&
    [ "$(grep -c '^PID ID SERVER' "$W/status.log")" = 1 ] || { cat "$W/status.log"; fail "every GPU's server's status and one ps, with only GPUs' servers"; }
printf 'get_client_list 1\n' | "$CTL" >"$W/nosuch.log" 2>&1 && fail "a server pid of none of them"
grep -q "Server 1 not found" "$W/nosuch.log" || { cat "$W/nosuch.log"; fail "a server pid of none: not said"; }
printf 'quit\n' | "$CTL" >"$W/quit2.log" 2>&1 || { cat "$W/quit2.log"; fail "quit with only GPUs' servers"; }
wait_for 15 all_gone || fail "quit left GPUs' servers running: $PIDS"
kill -0 "$OTHER" 2>/dev/null || fail "quit followed a link named like a GPU's folder"
printf 'quit\n' | MPSSHIM_PIPE_DIRECTORY=$W/elsewhere "$CTL" >/dev/null 2>&1
trap - EXIT
echo "ok: one list and one quit for the 3 servers; with only GPUs' servers, the same, the commands that list every server's or name one, and nothing else"
echo "PASS a server per GPU from one pipe directory (MPSSHIM_SERVER_PER_GPU)"
