#!/bin/bash
# A/B: store before (a7e0f33) and after the HTTP endpoints + per-RPC counters layer; put and status, 100 clients, alternated.
for r in 1 2 3; do
  for v in pre-http http; do
    for w in put status; do
      echo "== round $r $v $w"
      /work/main/bin/meganode bench $w --target meganode --clients 100 --duration 6s --quiet --store-bin /work/ab/$v/meganode-store 2>&1 | grep -A1 workload | tail -1
    done
  done
done
