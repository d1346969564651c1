#!/bin/sh
# diagnostic: the lister (the bench process) at nice 19 once the point-writer process runs
cd /work/main
out=$1; bin=${2:-new}
bin/meganode bench state --nodes 100000 --target meganode --skip-watch --skip-restart --store-bin /tmp/s14/store-$bin \
  --out $out > $out.log 2>&1 &
bpid=$!
while kill -0 $bpid 2>/dev/null; do
  w=$(pgrep -f "bench state-writers" | head -1)
  if [ -n "$w" ]; then
    for t in /proc/$bpid/task/*; do renice -n 19 -p ${t##*/} >/dev/null; done
    break
  fi
  sleep 0.05
done
wait $bpid
echo "$out: $(grep 'point-write p99' $out/summary.txt | tr -s ' ' | tr '\n' ' ')"
