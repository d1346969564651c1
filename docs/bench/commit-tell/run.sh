#!/bin/bash
# A/B of the leader telling its commit index on the next append (skip_bcast_commit, node.rs `tell_commit`) against the commit before it,
# alternated, same machine, one run: the leader's and a follower's CPU per write at 200 puts/s from
# one client (leader-base.sh), and the members' summed CPU per put under etcd's benchmark put at 100
# clients (group-put.sh). Binaries: $BASE (before) and $NEW (after). From the repository root:
#   BASE=/tmp/ab/store-direct NEW=/tmp/ab/store-commit flock /tmp/heavy.lock bash docs/bench/commit-tell/run.sh > docs/bench/commit-tell/output.txt 2>&1
set -e
here=$(dirname "$0")
for r in 1 2 3; do
  for v in base new; do
    bin=$BASE; [ $v = new ] && bin=$NEW
    echo "== $v round $r ($bin)"
    STORE_BIN=$bin bash $here/leader-base.sh 2>&1 | grep -E "µs|Requests"
    STORE_BIN=$bin bash $here/group-put.sh 2>&1 | grep -E "µs|Requests|99.9%"
  done
done
