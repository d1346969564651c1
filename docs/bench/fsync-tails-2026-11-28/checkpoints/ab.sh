#!/bin/bash
# A/B (store only, fsync put, 100 clients, 3 rounds per run, alternated twice): checkpoints at the
# default (--wal-checkpoint-bytes 64 MiB) vs none in the run. Usage: ab.sh OUTDIR (from the repository root)
out=$1; mkdir -p $out
for i in 1 2; do
 for v in default nockpt; do
  extra=""; [ $v = nockpt ] && extra="--wal-checkpoint-bytes=100000000000"
  bin/meganode bench put --target meganode --clients 100 --conns 10 --duration 10s --rounds 3 --key-size 48 --val-size 1024 --key-space-size 100000 \
   --store-args="--durability=fsync $extra" --store-data-dir /work/main/bin/bench-disk --label $v-$i --out $out/$v-$i > $out/$v-$i.txt 2>&1

 done
done
