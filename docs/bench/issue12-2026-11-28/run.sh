#!/bin/bash
# Every target point of issue 12 on one commit, one after another on the same machine (after
# `make build etcd-benchmark`): make bench's put shapes (fsync and buffered) and lease-flood at 100
# and 1000 clients beside etcd 3.6 (`--target both`, rounds alternated), then etcd's own
# `benchmark put` at 100 and 1000 clients (docs/bench/etcd-benchmark/run.sh).
# Usage: docs/bench/issue12-2026-11-28/run.sh OUTDIR   (from the repository root)
set -u
out=${1:?out dir}; mkdir -p "$out" bin/bench-disk
common="--clients 100,1000 --conns 10 --duration 10s --target both"
put="--key-size 48 --val-size 1024 --key-space-size 100000"
bin/meganode bench put $common --rounds 5 $put --store-args=--durability=fsync --etcd-data-dir bin/bench-disk \
  --label fsync --out "$out/put-fsync" > "$out/put-fsync.txt" 2>&1
bin/meganode bench put $common --rounds 3 $put --store-args=--durability=buffered \
  --label buffered --out "$out/put-buffered" > "$out/put-buffered.txt" 2>&1
bin/meganode bench lease-flood $common --rounds 3 --leases 10000 --out "$out/lease-flood" > "$out/lease-flood.txt" 2>&1
CLIENTS=100 ROUNDS=3 docs/bench/etcd-benchmark/run.sh "$out/etcd-benchmark-c100" > "$out/etcd-benchmark-c100.txt" 2>&1
CLIENTS=1000 ROUNDS=2 docs/bench/etcd-benchmark/run.sh "$out/etcd-benchmark-c1000" > "$out/etcd-benchmark-c1000.txt" 2>&1
rm -f "$out"/*/*.png "$out"/*/report.html
