#!/bin/bash
# noarm.sh BUILD OUT ROUNDS: 16-process PyTorch fleet, GPU replies with and without the event behind the store (probe)
B=$1; OUT=$2; R=$3
for r in $(seq $R); do
  for v in 0 1; do
    vars=(); [ $v = 1 ] && vars=(MPSSHIM_PROBE_NOARM=1)
    timeout 100 python3 bench/cpusplit.py $B mpsshim 16 "${vars[@]}" > $OUT/n$v-r$r.txt 2>&1
    echo "round $r noarm=$v: $(grep -m1 'steps/s' $OUT/n$v-r$r.txt)"
  done
done
timeout 100 python3 bench/cpusplit.py $B mps 16 > $OUT/mps.txt 2>&1; echo "mps: $(grep -m1 'steps/s' $OUT/mps.txt)"
