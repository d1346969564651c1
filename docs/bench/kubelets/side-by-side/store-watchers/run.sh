#!/usr/bin/env bash
# The side-by-side run again on meganode-store (200 hollow kubelets vs 200 KWOK nodes, 5 pods per node
# at 20/s, 60 s steady window) with the store's meganode_watchers_by_prefix gauge, which the first
# runs (../meganode, ..) predate: which resources hold watches on the store, by kind of node.
# Run from the repository root. flock -o: the lock is not passed on to the cluster's processes.
set -euo pipefail
D=docs/bench/kubelets/side-by-side/store-watchers
flock -o /tmp/heavy.lock bin/meganode bench nodes --kind both --nodes 200 --pods-per-node 5 --qps 20 --window 60s \
  --out $D > $D/stdout.txt 2> $D/stderr.txt
