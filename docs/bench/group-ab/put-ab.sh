#!/bin/bash
# The group-put half of run.sh alone: BASE vs NEW store binaries, $R rounds (default 3), alternated. From the repository root:
#   BASE=/tmp/ab/store-base NEW=/tmp/ab/store-new R=4 flock /tmp/heavy.lock bash docs/bench/group-ab/put-ab.sh > DIR/output.txt 2>&1
cd "$(dirname "$0")/../../.."
for r in $(seq 1 ${R:-3}); do
  for v in base new; do
    bin=$BASE; [ $v = new ] && bin=$NEW
    echo "== $v round $r ($bin)"
    STORE_BIN=$bin bash docs/bench/group-ab/group-put.sh 2>&1 | grep -E "µs|Requests|99.9%"
  done
done
