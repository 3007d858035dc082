#!/bin/bash
# abenv.sh OUT ROUNDS BUILD NAME[:VAR=VAL,...]...: in turns, a fresh server per variant (its
# settings in the server's and the client's environment); native and shim callbench + pinned copysweep
OUT=$1; ROUNDS=$2; B=$(cd $3 && pwd); shift 3
W=$(mktemp -d /tmp/ab.XXXX)
export MPSSHIM_PIPE_DIRECTORY=$W/pipe MPSSHIM_LOG_DIRECTORY=$W/log MPSSHIM_TEST_KERNELS=$B/tests
for r in $(seq $ROUNDS); do
  for v in "$@"; do
    name=${v%%:*}; sets=(); [ "$name" != "$v" ] && IFS=, read -ra sets <<< "${v#*:}"
    rm -rf $W/pipe $W/log; mkdir -p $W/pipe $W/log
    env -u LD_PRELOAD "${sets[@]}" timeout 40 $B/mpsshim-control -d || { echo no server; exit 1; }
    env "${sets[@]}" LD_PRELOAD=$B/libmpsshim.so $B/bench/callbench launch_sync_us > /dev/null 2>&1; sleep 1
    for _ in 1 2; do
      for m in native shim; do
        pre=(env "${sets[@]}"); [ $m = shim ] && pre+=("LD_PRELOAD=$B/libmpsshim.so")
        "${pre[@]}" $B/bench/callbench launch_sync_us launch_ctxsync_us memcpy_4b_dtoh_us 2>&1 | awk -v t="$r $name $m" '/^metric/ {print t, $2, $3}' >> $OUT/ab.txt
        "${pre[@]}" $B/bench/copysweep --kind pinned --max 1 2>&1 | awk -v t="$r $name $m" '/^metric/ {print t, $2, $3}' >> $OUT/ab.txt
      done
    done
    echo quit | $B/mpsshim-control > /dev/null 2>&1; sleep 0.5
  done
done
python3 - "$OUT/ab.txt" <<'PY'
import sys, statistics as st, collections
rows = [l.split() for l in open(sys.argv[1])]
d = collections.defaultdict(list)
for r, b, m, k, v in rows: d[(r, b, m, k)].append(float(v))
builds = list(dict.fromkeys(b for _, b, _, _, _ in rows)); metrics = sorted({k for *_, k, _ in rows})
rounds = sorted({r for r, *_ in rows})
for k in metrics:
    line = "%-30s" % k
    for b in builds:
        rat = []
        for r in rounds:
            n, s = d.get((r, b, 'native', k)), d.get((r, b, 'shim', k))
            if not n or not s: continue
            n, s = st.median(n), st.median(s)
            rat.append(s - n if k.endswith('_us') else s / n)
        if rat: line += " | %s: %s (med %.3f)" % (b, " ".join("%.2f" % x for x in rat), st.median(rat))
    print(line)
PY
