#!/bin/bash
# startphase.sh BUILD OUT ROUNDS: 8 PyTorch processes at once, phases, per mode
B=$(cd "$1" && pwd); OUT=$2; ROUNDS=${3:-3}; N=${N:-8}
W=$(mktemp -d /tmp/sp.XXXX)
run8() { # prefix...
    local i
    for i in $(seq $N); do "$@" python3 scratch/startphase.py > $W/p.$i 2>&1 & done
    wait
    cat $W/p.* | awk '/^phase/ {for (k=2;k<=5;k++) if ($k>m[k]) m[k]=$k; t=$2+$3+$4+$5; if (t>mt) mt=t; n++} END {printf "n=%d import %.2f init %.2f net %.2f step %.2f total %.2f\n", n, m[2], m[3], m[4], m[5], mt}'
    grep -v "^phase" $W/p.* | head -5
}
for r in $(seq $ROUNDS); do
  for mode in native mps fresh warm; do
    echo "== round $r $mode"
    case $mode in
    native) run8 env ;;
    mps) export CUDA_MPS_PIPE_DIRECTORY=$W/mp CUDA_MPS_LOG_DIRECTORY=$W/ml; mkdir -p $W/mp $W/ml
         nvidia-cuda-mps-control -d; run8 env; echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    fresh|warm) export MPSSHIM_PIPE_DIRECTORY=$W/sp MPSSHIM_LOG_DIRECTORY=$W/sl; rm -rf $W/sp $W/sl; mkdir -p $W/sp $W/sl
         $B/mpsshim-control -d
         if [ $mode = warm ]; then LD_PRELOAD=$B/libmpsshim.so $B/bench/callbench launch_sync_us memcpy_4b_dtoh_us > /dev/null; sleep 1; fi
         run8 env LD_PRELOAD=$B/libmpsshim.so
         grep -i "quiet" $W/sl/*.log | tail -2
         echo quit | $B/mpsshim-control; sleep 1 ;;
    esac
  done
done
