#!/bin/bash
# fsync put at 100 clients beside etcd while another process writes 64 MiB and fdatasyncs it every
# 0.5 s on the same disk (a neighbour's batch job, a log shipper): the tails under disk contention.
# Usage: hog.sh OUTDIR [ROUNDS]   (from the repository root, after make build)
out=${1:?out dir}; rounds=${2:-3}
mkdir -p bin/bench-disk
( while :; do dd if=/dev/zero of=bin/bench-disk/hog bs=1M count=64 conv=fdatasync status=none; sleep 0.5; done ) &
hog=$!
bin/meganode bench put --target both --clients 100 --rounds $rounds --conns 10 --duration 10s --key-size 48 --val-size 1024 \
  --key-space-size 100000 --store-args="--durability=fsync ${STORE_EXTRA:-}" --etcd-data-dir bin/bench-disk --label fsync-diskhog --out "$out" > "$out.txt" 2>&1
kill $hog; wait $hog 2>/dev/null; rm -f bin/bench-disk/hog
