#!/bin/bash
# pp.sh BUILD: pinned copies alone, after pageable ones in the same process, and alone again
B=$(cd $1 && pwd); W=$(mktemp -d /tmp/pp.XXXX)
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log MPSSHIM_TEST_KERNELS=$B/tests
mkdir -p $W/pipe $W/log
$B/mpsshim-control -d
LD_PRELOAD=$B/libmpsshim.so $B/bench/callbench launch_sync_us > /dev/null; sleep 1
show() { awk -v t="$1" '/pinned_(4096|16384|65536|262144|1048576) / {split($2,a,"_"); printf "%s%s ", substr(a[2],1,1), $3} END {print "  " t}'; }
for r in 1 2; do
  $B/bench/copysweep --kind pinned --max 1 | show "native pinned-only"
  LD_PRELOAD=$B/libmpsshim.so $B/bench/copysweep --kind pinned --max 1 | show "shim pinned-only"
  LD_PRELOAD=$B/libmpsshim.so $B/bench/copysweep --max 1 | show "shim all-kinds (pageable first) max 1"
  LD_PRELOAD=$B/libmpsshim.so $B/bench/copysweep --max 256 | show "shim all-kinds max 256 (the bench's)"
  LD_PRELOAD=$B/libmpsshim.so $B/bench/copysweep --kind pinned --max 1 | show "shim pinned-only again"
  $B/bench/copysweep --max 256 | show "native all-kinds max 256"
done
echo quit | $B/mpsshim-control
