#!/bin/bash
# A = main 35e1d8f, B = shared informer + 32 in flight, C = shared informer only; driver = B's binary
for round in 1 2; do for v in A B C; do
  flock /tmp/heavy.lock /work/abB/meganode scheduler bench --bin-dir /work/ab$v --nodes 5000 --pods 5000 --shards 1 --latency-pods 0 --node-lease-seconds 600 --no-stock --bind-ceiling=false --state-dir /tmp/ab-state > /work/runs/ab-$v-$round.txt 2>&1
  echo "$v $round $(grep -E 'drained' /work/runs/ab-$v-$round.txt | sed 's/utilisation.*//')"
  grep "by process" /work/runs/ab-$v-$round.txt | grep -v idle
done; done
