#!/bin/sh
# A/B of the history spill: the same store binary with --history-spill=true (default) and =false,
# and etcd 3.6 on tmpfs, alternated, two rounds: bench put, 1 KiB values over 100K keys, 10 s.
B=/work/main/bin/meganode; S=${S:-/work/main/bin/meganode-store}; out=${OUT:-/tmp/b12/spill-ab}; mkdir -p $out
for i in 1 2; do
  for t in on off etcd; do
    case $t in
      on) tg="--target meganode --store-bin $S --store-args=--history-spill=true" ;;
      off) tg="--target meganode --store-bin $S --store-args=--history-spill=false" ;;
      etcd) tg="--target etcd" ;;
    esac
    flock /tmp/heavy.lock $B bench put --duration 10s --rounds 1 $tg --conns 10 --clients 100,1000 \
      --key-size 48 --val-size 1024 --key-space-size 100000 --out $out/put-$t-$i > $out/put-$t-$i.log 2>&1
  done
done
echo ALLDONE
