#!/bin/sh
# A/B of the checkpoint cut (store: 33db261) against main before it (da9c06e):
# etcd's put shape (1 KiB values, 100K keys, 10 connections), buffered, 100 and
# 1000 clients, each variant beside real etcd in the same run, alternated twice.
# Usage: OLD=dir NEW=dir docs/bench/checkpoint-stall/ab.sh OUTDIR   (dirs holding meganode-store)
set -e
out=${1:-docs/bench/checkpoint-stall}
for round in 1 2; do
  for v in old new; do
    eval dir=\$$(echo $v | tr a-z A-Z)
    flock /tmp/heavy.lock bin/meganode bench put --duration 10s --rounds 1 --target both --clients 100,1000 --conns 10 \
      --key-size 48 --val-size 1024 --key-space-size 100000 --store-bin "$dir/meganode-store" \
      --store-args=--durability=buffered --out "$out/$v-$round" > "$out/$v-$round.txt" 2>&1
    grep -A5 'workload  clients' "$out/$v-$round.txt"
  done
done
