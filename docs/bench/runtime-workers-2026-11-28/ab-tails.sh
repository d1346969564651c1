#!/bin/bash
# Tails A/B: fsync put at 100 clients, 5 rounds beside etcd, --runtime-workers=2 and auto alternated, twice.
cd "$(dirname "$0")/../../.."
out=${1:?out dir}
for pass in 1 2; do
  for w in auto 2; do
    bin/meganode bench put --target both --clients 100 --rounds 5 --conns 10 --duration 10s --key-size 48 --val-size 1024 \
      --key-space-size 100000 --store-args="--durability=fsync --runtime-workers=$w" --etcd-data-dir bin/bench-disk \
      --label fsync-w$w --out $out/tails-w$w-$pass > $out/tails-w$w-$pass.txt 2>&1
  done
done
