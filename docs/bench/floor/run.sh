#!/bin/sh
# The floor beside put: the server's CPU per call of unary RPCs that do no store work
# (get-missing: Range of a missing key; status: Maintenance Status) next to put's, each
# against meganode-store and etcd 3.6 in the same run, 2 rounds alternated.
set -e
out=${1:-docs/bench/floor}
common="--duration 10s --rounds 2 --target both --clients 100,1000 --conns 10"
for w in put get-missing status; do
  flock /tmp/heavy.lock bin/meganode bench $w $common --out "$out/$w" > "$out/$w.txt" 2>&1
  find "$out/$w" -name '*.png' -o -name '*.html' | xargs rm -f
  grep -A8 'workload  clients' "$out/$w.txt"
done
