#!/bin/sh
# The heartbeat ceiling (issue 37, part 3): meganode-store, then etcd 3.6, each under kube-apiserver,
# node Lease renewals stepped until the lease PUT p99 passes 1 s. Run from the repository root
# after `make build k8s-bins`; took 13 minutes on 2 cores.
set -e
bin/meganode bench heartbeat --store both --leases 10000 \
  --rates 400,500,600,700,800,900,1000,1100,1200,1300,1400,1500,1700 \
  --step 60s --warmup 10s --out docs/bench/heartbeat \
  > docs/bench/heartbeat/stdout.txt 2> docs/bench/heartbeat/stderr.txt
