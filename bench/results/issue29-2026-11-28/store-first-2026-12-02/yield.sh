#!/bin/bash
# yield.sh BUILD OUT ROUNDS
B=$1; OUT=$2; R=$3
for r in $(seq $R); do
  for v in 0 1 4; do
    vars=(); [ $v != 0 ] && vars=(MPSSHIM_PROBE_YIELD=$v)
    timeout 120 python3 bench/cpusplit.py $B mpsshim 16 "${vars[@]}" > $OUT/y$v-r$r.txt 2>&1
    echo "round $r yield=$v: $(grep -m1 'steps/s' $OUT/y$v-r$r.txt)"
  done
done
timeout 120 python3 bench/cpusplit.py $B mps 16 > $OUT/mps.txt 2>&1
echo "mps: $(grep -m1 'steps/s' $OUT/mps.txt)"
