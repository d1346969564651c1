#!/bin/bash
# An A/B of two store binaries on 3-member groups, alternated, three rounds, same machine: the
# leader's and a follower's CPU per write at 200 puts/s from one client (watch-fanout/leader-base.sh,
# without perf), then the members' summed CPU per put under etcd's benchmark put at 100 clients
# (group-put.sh). Binaries: $BASE (before) and $NEW (after). From the repository root, e.g.:
#   BASE=/tmp/ab/store-base NEW=/tmp/ab/store-new flock /tmp/heavy.lock bash docs/bench/group-ab/run.sh > DIR/output.txt 2>&1
#   python3 docs/bench/group-ab/summarize.py DIR "what base is" "what new is"
set -e
here=$(dirname "$0")
for r in 1 2 3; do
  for v in base new; do
    bin=$BASE; [ $v = new ] && bin=$NEW
    echo "== $v round $r ($bin)"
    STORE_BIN=$bin N=3000 IDLE=2 PERF=0 bash $here/../watch-fanout/leader-base.sh 2>&1 | grep -E "µs|Requests"
    STORE_BIN=$bin bash $here/group-put.sh 2>&1 | grep -E "µs|Requests|99.9%"
  done
done
