#!/bin/sh
# How much of the slowest fsync-mode put is the disk's: etcd's `benchmark put` (100 clients, 10
# connections, 48 B keys, 1 KiB values over 100K keys) against meganode-store --durability=fsync and
# real etcd 3.6 (`meganode etcd`), both with their data in bin/bench-disk (the same disk), alternated,
# ROUNDS rounds each, each run ≈ 10 s (store STORE_TOTAL puts, etcd ETCD_TOTAL). After each run the
# server's own /metrics gives its WAL fsync histogram (etcd_disk_wal_fsync_duration_seconds, the
# same metric in both): the slowest fsync lies in the last bucket that grew, (le/2, le].
# Usage: docs/bench/fsync-tails-2026-11-28/run.sh OUTDIR   (from the repository root, after `make build etcd-benchmark`)
set -e
out=${1:?out dir}; mkdir -p "$out" bin/bench-disk
ROUNDS=${ROUNDS:-5}; CLIENTS=${CLIENTS:-100}; STORE_TOTAL=${STORE_TOTAL:-300000}; ETCD_TOTAL=${ETCD_TOTAL:-120000}
fsync_hist() { curl -s http://127.0.0.1:$1/metrics | grep '^etcd_disk_wal_fsync_duration_seconds_bucket' | sed 's/.*le="\([^"]*\)"} /\1 /'; }
one() { # target round
  t=$1; r=$2; d=$(mktemp -d bin/bench-disk/fsync-tails-$t-XXXX); port=$((20000 + $$ % 10000))
  if [ $t = meganode ]; then
    total=$STORE_TOTAL
    bin/meganode-store --data-dir $d --durability fsync --listen-client-urls http://127.0.0.1:$port > $out/$t-$r.server.log 2>&1 &
  else
    total=$ETCD_TOTAL
    bin/meganode etcd --data-dir $d --listen-client-urls http://127.0.0.1:$port > $out/$t-$r.server.log 2>&1 &
  fi
  pid=$!
  for i in $(seq 100); do bin/benchmark --endpoints 127.0.0.1:$port --clients 1 --conns 1 put --total 1 >/dev/null 2>&1 && break; sleep 0.1; done
  fsync_hist $port > $out/$t-$r.fsync-before
  bin/benchmark --endpoints 127.0.0.1:$port --clients $CLIENTS --conns 10 put --key-size 48 --val-size 1024 \
    --key-space-size 100000 --total $total > $out/$t-$r.txt 2>&1
  fsync_hist $port > $out/$t-$r.fsync-after
  kill $pid; wait $pid 2>/dev/null || true; rm -rf $d
  echo "$t round $r: $(grep -E 'Requests/sec' $out/$t-$r.txt | tr -s ' ')"
}
for r in $(seq $ROUNDS); do one meganode $r; one etcd $r; done
