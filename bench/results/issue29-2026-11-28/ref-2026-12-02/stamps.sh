#!/bin/bash
# stamps.sh OUT BUILD ROUNDS: a STAMPS server, warm; per round copysweep 4 KiB pinned and callbench, stages
OUT=$1; B=$(cd $2 && pwd); R=$3
W=$(mktemp -d /tmp/st.XXXX)
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log MPSSHIM_TEST_KERNELS=$B/tests
mkdir -p $W/pipe $W/log
env -u LD_PRELOAD timeout 40 $B/mpsshim-control -d || exit 1
LD_PRELOAD=$B/libmpsshim.so $B/bench/callbench launch_sync_us > /dev/null 2>&1; sleep 1
for r in $(seq $R); do
  for prog in "copysweep --kind pinned --max-kib 64" "callbench launch_sync_us"; do
    $B/bench/$prog 2>&1 | sed "s/^/native r$r /" >> $OUT/st.txt
    rm -rf /tmp/mpsshim-stamps
    LD_PRELOAD=$B/libmpsshim.so $B/bench/$prog 2>&1 | sed "s/^/shim r$r /" >> $OUT/st.txt
    sleep 0.3
    echo "== r$r $prog" >> $OUT/st.txt
    python3 bench/stamps.py --gen $B/gen --skip 20 /tmp/mpsshim-stamps >> $OUT/st.txt 2>&1
  done
done
echo quit | $B/mpsshim-control > /dev/null 2>&1
grep -v "^native\|^shim" $OUT/st.txt | head -80; grep "metric" $OUT/st.txt
