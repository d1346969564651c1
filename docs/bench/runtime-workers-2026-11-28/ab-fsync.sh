#!/bin/bash
# A/B: the same store binary with 2 runtime workers (the old default on 2 CPUs) and auto (1), each beside etcd
cd "$(dirname "$0")/../../.."
out=$1; shift  # usage: ab-fsync.sh OUTDIR (after make build)
for pass in 1 2; do
  for w in 2 auto; do
    flock /tmp/heavy.lock bin/meganode bench put --target both --clients 100,1000 --rounds 3 --store-args="--durability=fsync --runtime-workers=$w" --etcd-data-dir bin/bench-disk --label fsync-w$w --out $out/fsync-w$w-$pass > $out/fsync-w$w-$pass.log 2>&1
  done
done
