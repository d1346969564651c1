#!/usr/bin/env bash
# `meganode bench nodes` (issue 39): 200 hollow kubelets vs 200 KWOK nodes, 5 pods per node created
# at 20/s, one 60 s steady window each, on meganode-store; then the kubelet case on etcd 3.6 with the
# first report's runs included, so that ./report.json and ./summary.md hold all three side by side.
# Run from the repository root after `make k8s-bins` and a build of bin/meganode. flock -o: the
# lock is not passed on to the cluster's processes.
set -euo pipefail
D=docs/bench/kubelets/side-by-side
mkdir -p $D/meganode
flock -o /tmp/heavy.lock bin/meganode bench nodes --kind both --nodes 200 --pods-per-node 5 --qps 20 --window 60s \
  --out $D/meganode > $D/meganode/stdout.txt 2> $D/meganode/stderr.txt
flock -o /tmp/heavy.lock bin/meganode bench nodes --kind kubelet --store etcd --nodes 200 --pods-per-node 5 --qps 20 --window 60s \
  --include $D/meganode/report.json --out $D > $D/stdout-etcd.txt 2> $D/stderr-etcd.txt
