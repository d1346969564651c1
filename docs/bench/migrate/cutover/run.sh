#!/usr/bin/env bash
# The cut-over of a `meganode up` cluster with NODES KWOK nodes and PODS pods, etcd → meganode-store
# → etcd (issue 38, part 3). Run from the repository root after `make build k8s-bins`; writes
# *.txt and */result.json beside this script. On a shared machine wrap it: flock /tmp/heavy.lock bash run.sh
set -uo pipefail
NODES=${NODES:-5000}
PODS=${PODS:-5000}
CHECK_PODS=${CHECK_PODS:-100}
S=${STATE_DIR:-/tmp/meganode-cutover}
OUT=$(cd "$(dirname "$0")" && pwd)
B=${MEGANODE:-bin/meganode}
run() { echo "\$ $*" >&2; "$@"; }
$B down --state-dir "$S" >/dev/null 2>&1
rm -rf "$S"
# Whatever happens, the cluster is stopped (its processes would otherwise outlive the script).
trap '$B down --state-dir "$S" >> "$OUT/setup.txt" 2>&1' EXIT
{
  date -u +%FT%TZ; uname -r; nproc; free -g | sed -n 2p
  run $B up --store etcd --store-shards 1 --nodes "$NODES" --pods "$PODS" --state-dir "$S" || exit 1
  run $B create-pods --count "$PODS" --state-dir "$S" --out "$S/report-pods" > "$OUT/create-pods.txt" || exit 1
  tail -3 "$OUT/create-pods.txt"
} > "$OUT/setup.txt" 2>&1
rc=0
run $B migrate --to store --check-pods "$CHECK_PODS" --state-dir "$S" --out "$OUT/to-store" > "$OUT/to-store.txt" 2> "$OUT/to-store.stderr.txt" || rc=1
run $B migrate --to etcd --check-pods "$CHECK_PODS" --state-dir "$S" --out "$OUT/to-etcd" > "$OUT/to-etcd.txt" 2> "$OUT/to-etcd.stderr.txt" || rc=1
exit $rc
