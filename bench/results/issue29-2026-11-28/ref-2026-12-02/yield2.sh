#!/bin/bash
# yield2.sh BUILD OUT ROUNDS: 16-process PyTorch fleet (cpusplit), default vs MPSSHIM_CROWDED_YIELD_LOOKS=64/256, in turns
B=$1; OUT=$2; R=$3
for r in $(seq $R); do
  for v in 1024 64 256; do
    timeout 100 python3 bench/cpusplit.py $B mpsshim 16 MPSSHIM_CROWDED_YIELD_LOOKS=$v > $OUT/y$v-r$r.txt 2>&1
    echo "round $r looks=$v: $(grep -m1 'steps/s' $OUT/y$v-r$r.txt)"
  done
done
