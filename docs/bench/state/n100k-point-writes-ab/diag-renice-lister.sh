#!/bin/sh
# diagnostic: with the lister (the bench process) at nice 10 once the point-writer process runs
cd /work/h-pw
out=$1; target=${2:-meganode}; bin=${3:-new}
bin/meganode bench state --nodes 100000 --target $target --skip-watch --skip-restart --store-bin /tmp/pw-$bin-store \
  --point-writers-in process --out $out > $out.log 2>&1 &
bpid=$!
while kill -0 $bpid 2>/dev/null; do
  w=$(pgrep -f "bench state-writers" | head -1)
  if [ -n "$w" ]; then
    for t in /proc/$bpid/task/*; do renice -n 10 -p ${t##*/} >/dev/null; done
    echo "reniced bench $bpid, writers $w at $(cat /proc/$w/stat | awk '{print $19}')"
    break
  fi
  sleep 0.05
done
wait $bpid
