#!/bin/sh
# etcd's own `benchmark put` (tools/benchmark v3.6.8, `make etcd-benchmark`) against meganode-store
# (its defaults: buffered durability) and real etcd 3.6 (`meganode etcd`), both with their data on
# /dev/shm, alternated, ROUNDS rounds each: the issue-12 shape (1000 clients, 10 connections, 48 B keys,
# 1 KiB values, 200K puts over 100K keys; CLIENTS=100 for the other point). Server CPU per put is
# utime+stime from /proc/<pid>/stat before and after the run; peak RSS is VmHWM.
# Usage: docs/bench/etcd-benchmark/run.sh OUTDIR   (from the repository root, after `make build etcd-benchmark`)
set -e
out=${1:?out dir}; mkdir -p "$out"
ROUNDS=${ROUNDS:-2}; CLIENTS=${CLIENTS:-1000}; TOTAL=${TOTAL:-200000}
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
one() { # target round
  t=$1; r=$2; d=$(mktemp -d /dev/shm/etcdbench-$t-XXXX); port=$((20000 + $$ % 10000))
  if [ $t = meganode ]; then
    bin/meganode-store --data-dir $d --listen-client-urls http://127.0.0.1:$port > $out/$t-$r.server.log 2>&1 &
  else
    bin/meganode etcd --data-dir $d --listen-client-urls http://127.0.0.1:$port > $out/$t-$r.server.log 2>&1 &
  fi
  pid=$!
  for i in $(seq 100); do bin/benchmark --endpoints 127.0.0.1:$port --clients 1 --conns 1 put --total 1 >/dev/null 2>&1 && break; sleep 0.1; done
  c0=$(cpu $pid)
  bin/benchmark --endpoints 127.0.0.1:$port --clients $CLIENTS --conns 10 put --key-size 48 --val-size 1024 \
    --key-space-size 100000 --total $TOTAL > $out/$t-$r.txt 2>&1
  c1=$(cpu $pid); hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
  kill $pid; wait $pid 2>/dev/null || true; rm -rf $d
  echo "server_cpu_ticks=$((c1 - c0)) clk_tck=$tick cpu_us_per_put=$(( (c1 - c0) * 1000000 / tick / TOTAL )) peak_rss_kib=$hwm" >> $out/$t-$r.txt
  echo "$t round $r: $(grep -E 'Requests/sec' $out/$t-$r.txt | tr -s ' ') $(tail -1 $out/$t-$r.txt)"
}
for r in $(seq $ROUNDS); do one meganode $r; one etcd $r; done
