#!/bin/sh
# A/B: store binary base vs new, point writers shared vs process; list phase only; alternated
cd /work/h-pw
out=/tmp/pw-ab; mkdir -p $out
for i in 1 2; do
  for bin in base new; do
    for mode in shared process; do
      d=$out/$i-$bin-$mode
      flock /tmp/heavy.lock bin/meganode bench state --nodes 100000 --target meganode --skip-watch --skip-restart \
        --store-bin /tmp/pw-$bin-store --point-writers-in $mode --out $d > $d.log 2>&1
      echo "$d rc=$?"
    done
  done
  for mode in shared process; do
    d=$out/$i-etcd-$mode
    flock /tmp/heavy.lock bin/meganode bench state --nodes 100000 --target etcd --skip-watch --skip-restart \
      --point-writers-in $mode --out $d > $d.log 2>&1
    echo "$d rc=$?"
  done
done
