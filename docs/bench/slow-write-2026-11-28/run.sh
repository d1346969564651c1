#!/bin/bash
# Buffered put with every log write made 20 ms slow (--test-fault-write-latency), 1000 clients, one
# runtime worker, standalone store, 10 s: BEFORE=<binary> (writers wrote on the worker whenever the
# file was free) against bin/meganode-store (a log whose last write was slow is written by wal-write).
# Usage: BEFORE=/path/to/old/meganode-store run.sh OUTDIR   (from the repository root, after make build)
out=${1:?out dir}; mkdir -p "$out" bin/bench-disk
one() { # label binary
  d=$(mktemp -d bin/bench-disk/slow-write-XXXX)
  $2 --data-dir $d --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
    --durability=buffered --test-fault-write-latency=20ms --runtime-workers=1 > "$out/$1.store.log" 2>&1 &
  s=$!; sleep 1.5
  bin/meganode bench put --target meganode --endpoints 127.0.0.1:23790 --server-pid $s --clients 1000 --conns 10 \
    --duration 10s --key-size 48 --val-size 1024 --key-space-size 100000 --out "$out/$1" > "$out/$1.txt" 2>&1
  kill $s; wait $s 2>/dev/null; rm -rf $d
  tail -1 "$out/$1.txt"
}
for r in 1 2; do one before-$r "${BEFORE:?BEFORE=old binary}"; one after-$r bin/meganode-store; done
