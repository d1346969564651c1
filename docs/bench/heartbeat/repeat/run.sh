#!/bin/sh
# The same run as ../run.sh, repeated right after it, to show the run-to-run spread of the ceiling.
set -e
bin/meganode bench heartbeat --store both --leases 10000 \
  --rates 400,500,600,700,800,900,1000,1100,1200,1300,1400,1500,1700 \
  --step 60s --warmup 10s --out docs/bench/heartbeat/repeat \
  > docs/bench/heartbeat/repeat/stdout.txt 2> docs/bench/heartbeat/repeat/stderr.txt
