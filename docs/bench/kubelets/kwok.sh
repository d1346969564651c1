#!/usr/bin/env bash
# The KWOK side of the same load as `measure.sh N PODS_PER_NODE WINDOW QPS`'s create-pods phase:
# `meganode up --nodes N` (KWOK nodes), create-pods of N×PODS_PER_NODE pods at QPS/s, down.
# Usage: kwok.sh N [PODS_PER_NODE] [QPS]; create-pods' report.json goes to $REPORT_JSON.
set -euo pipefail
N=${1:?usage: kwok.sh N [PODS_PER_NODE] [QPS]}
PPN=${2:-5}
QPS=${3:-20}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
MEGANODE=$ROOT/bin/meganode
STATE=${STATE_DIR:-/tmp/meganode-kwok-bench}
echo "# $(date -u +%FT%TZ) $(nproc) cores; N=$N KWOK nodes, pods/node=$PPN, create qps=$QPS"
echo "\$ meganode up --nodes $N --state-dir $STATE"
"$MEGANODE" up --nodes "$N" --state-dir "$STATE" 2>&1 | grep -v '^\s*$' | grep -v ' ops/s now' | tail -4
sleep 20
echo "\$ meganode create-pods --count $((N * PPN)) --qps $QPS --state-dir $STATE"
"$MEGANODE" create-pods --count $((N * PPN)) --qps "$QPS" --state-dir "$STATE" 2>&1 | grep -v '^\s*$' | grep -v ' ops/s now'
if [ -n "${REPORT_JSON:-}" ]; then cp "$STATE/report/report.json" "$REPORT_JSON"; fi
echo "\$ meganode down --state-dir $STATE"
"$MEGANODE" down --state-dir "$STATE" 2>&1 | tail -1
echo "processes left mentioning $STATE: $(ps -eo pid,args | awk -v s="$STATE" 'index($0, s) && !/awk/' | wc -l)"
