#!/usr/bin/env bash
# `make demo`: four ordinary CUDA programs at once, through the shim, on one server.
# With a GPU, the server drives it; without one, the CPU test driver stands behind the
# server, and this says so.
set -u
B=$(cd "${1:-build}" && pwd)
WORK=$(mktemp -d /tmp/mpsshim-demo.XXXXXX)
export MPSSHIM_PIPE_DIRECTORY=$WORK/pipe MPSSHIM_LOG_DIRECTORY=$WORK/log
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    gpu=1
    echo "GPU found: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
else
    gpu=0
    export MPSSHIM_DRIVER=$B/cpudrv/libcuda.so.1
    echo "No GPU here: the server runs on the CPU test driver (a test double that computes"
    echo "the kernels on the CPU). This shows the mechanism, not GPU performance."
fi
trap 'printf "quit\n" | "$B/mpsshim-control" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
"$B/mpsshim-control" -d || { cat "$WORK/log/server.log"; exit 1; }
server=$(cat "$MPSSHIM_PIPE_DIRECTORY/server.pid")
echo "mpsshim server $server started"
echo
pids=()
for i in 1 2 3 4; do
    LD_PRELOAD=$B/libmpsshim.so "$B/demo/client" "$i" 3 "$B/tests" &
    pids+=($!)
done
sleep 2
echo
# On a machine of several GPUs the clients move to their GPU's own server at their first
# context (MPSSHIM_SERVER_PER_GPU's default: docs/operations.md, "A server per GPU"), so the
# list is every server's (ps), and the logs below are every server's.
echo "clients connected (mpsshim-control ps: every server of the pipe directory):"
printf 'ps\n' | "$B/mpsshim-control" | sed 's/^/  /'
if [ "$gpu" = 1 ]; then
    echo "processes using the GPU (nvidia-smi): one context per GPU used, its server's"
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | sed 's/^/  /'
fi
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
sleep 0.5 # the server notices the clients' exits asynchronously
echo
for f in "$WORK/log/server.log" "$WORK"/log/gpu-*/server.log; do
    [ -f "$f" ] || continue
    echo "server log (${f#"$WORK/log/"}):"
    sed 's/^/  /' "$f"
done
[ "$rc" = 0 ] && echo "demo: 4 clients shared one server context, all results correct" ||
    echo "demo: FAILED"
exit $rc
