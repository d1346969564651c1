#!/bin/bash
# The other make-bench workloads with --runtime-workers=2 (the old default on 2 CPUs) and auto (1),
# the same store binary, alternated, meganode only, 3 rounds of 10 s.
cd "$(dirname "$0")/../../.."
out=$1
run() { # name workload args...
  local name=$1; shift
  for w in 2 auto; do
    flock /tmp/heavy.lock bin/meganode bench "$@" --target meganode --rounds 3 --duration 10s --conns 10 --store-args="$SA --runtime-workers=$w" --label $name-w$w --out $out/$name-w$w > $out/$name-w$w.log 2>&1
  done
}
SA=--durability=buffered run put-buffered put --clients 100,1000 --key-size 48 --val-size 1024 --key-space-size 100000
SA=--durability=buffered run lease-flood lease-flood --clients 100,1000 --leases 10000
SA=--durability=buffered run watch watch --clients 100 --watchers 10 --val-size 1024
SA=--durability=buffered run get-missing get-missing --clients 100,1000
