#!/usr/bin/env bash
# Slow-disk figures (docs/design.md §5, "A slow disk"): `meganode bench put` against
# meganode-store alone, data on tmpfs, 1000 clients on 10 connections, the same
# TOTAL puts of 1 KiB values over 100,000 keys with and without an injected
# fsync latency (--test-fault-fsync-latency), per durability mode; then buffered
# with an injected write latency. Run from the repository root after `make build`.
set -euo pipefail
TOTAL=${TOTAL:-60000}
LAT=${LAT:-200ms}
OUT=${OUT:-docs/bench/slow-disk}
run() { # label, store args
  local label=$1; shift
  echo "=== $label: store args: $*"
  ./bin/meganode bench put --target meganode --quiet --clients 1000 --conns 10 --total "$TOTAL" \
    --key-size 48 --val-size 1024 --key-space-size 100000 --label "$label" --store-args "$*" \
    --out "$OUT/raw/$label" | tee "$OUT/raw/$label.txt"
}
mkdir -p "$OUT/raw"
for mode in fsync buffered none; do
  run "$mode-nofault" "--durability=$mode"
  run "$mode-fsync$LAT" "--durability=$mode --test-fault-fsync-latency=$LAT"
done
run "buffered-write20ms" "--durability=buffered --test-fault-write-latency=20ms"
