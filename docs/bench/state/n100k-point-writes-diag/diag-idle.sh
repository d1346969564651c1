#!/bin/sh
# diagnostic: the lister (bench process) in SCHED_IDLE once the point-writer process runs; store bulk threads SCHED_IDLE
cd /work/main
out=$1; bin=${2:-exp}
MEGANODE_BULK_SCHED_IDLE=1 bin/meganode bench state --nodes 100000 --target meganode --skip-watch --skip-restart --store-bin /tmp/s14/store-$bin \
  --out $out > $out.log 2>&1 &
bpid=$!
while kill -0 $bpid 2>/dev/null; do
  w=$(pgrep -f "bench state-writers" | head -1)
  if [ -n "$w" ]; then
    for t in /proc/$bpid/task/*; do chrt -i -p 0 ${t##*/} >/dev/null 2>&1; done
    break
  fi
  sleep 0.05
done
wait $bpid
echo "$out: $(grep 'point-write p99' $out/summary.txt | tr -s ' ' | tr '\n' ' ')"
