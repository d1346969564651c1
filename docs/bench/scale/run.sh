#!/bin/sh
# Issue 37, part 2: KWOK nodes and as many pods through a real kube-apiserver, meganode (meganode-store + the
# meganode scheduler) then the stock stack (etcd 3.6 + kube-scheduler), a fresh cluster per stack and size,
# stepping up the sizes until a stack does not hold one. Run from the repository root after `make build k8s-bins`,
# with nothing else heavy on the machine (here: under `flock -o /tmp/heavy.lock`, the machine's shared lock).
# `make scale SCALE_LADDER=5000,20000,50000,100000 SCALE_OUT=docs/bench/scale` runs the same.
set -e
out=${OUT:-docs/bench/scale}
ladder=${LADDER:-5000,20000,50000,100000}
bin/meganode bench scale --ladder "$ladder" --pods-per-node 1 --stack both --hold 60s \
  --state-dir /tmp/scale-helper/state --out "$out" \
  > "$out/stdout.txt" 2> "$out/stderr.txt"
