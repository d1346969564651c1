#!/usr/bin/env bash
# Hollow kubelets on this machine (issue 39): `meganode up --nodes 0 --kubelets N`, then two
# steady windows of WINDOW seconds — idle (no pods) and with PODS_PER_NODE pods per node made by
# `meganode create-pods` — sampling every hollow kubelet's CPU (utime+stime from /proc/<pid>/stat)
# and RSS (VmRSS), PSS and private memory (mem.sh), and kube-apiserver's and the store's; then `meganode down` and a check that no
# process of the cluster is left. Usage: measure.sh N [PODS_PER_NODE] [WINDOW] [QPS] (pod creates per
# second, 0 = as fast as the apiserver takes them); writes to stdout, create-pods' report.json to $REPORT_JSON.
set -euo pipefail
N=${1:?usage: measure.sh N [PODS_PER_NODE] [WINDOW]}
PPN=${2:-10}
WINDOW=${3:-60}
QPS=${4:-0}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
MEGANODE=$ROOT/bin/meganode
STATE=${STATE_DIR:-/tmp/meganode-kubelets-bench}
HZ=$(getconf CLK_TCK)

pids_of() { jq -r --arg k "$1" '.components[] | select(.kind == $k) | .pid' "$STATE/state.json"; }
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }
rss_kib() { local t=0 p; for p in "$@"; do t=$((t + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo $t; }

window() { # label
  local kl api store k0 a0 s0 k1 a1 s1
  kl=$(pids_of kubemark); api=$(pids_of kube-apiserver); store=$(pids_of meganode-store)
  k0=$(ticks $kl); a0=$(ticks $api); s0=$(ticks $store)
  sleep "$WINDOW"
  k1=$(ticks $kl); a1=$(ticks $api); s1=$(ticks $store)
  local n; n=$(echo $kl | wc -w)
  awk -v l="$1" -v n="$n" -v w="$WINDOW" -v hz="$HZ" -v kd=$((k1 - k0)) -v ad=$((a1 - a0)) -v sd=$((s1 - s0)) \
      -v kr="$(rss_kib $kl)" -v ar="$(rss_kib $api)" -v sr="$(rss_kib $store)" 'BEGIN {
    printf "%s window (%ds, %d hollow kubelets running):\n", l, w, n
    printf "  hollow kubelets: CPU %.3f cores total, %.2f ms CPU per node per second; RSS %.1f MiB total, %.1f MiB per node\n", kd/hz/w, 1000*kd/hz/w/n, kr/1024, kr/1024/n
    printf "  kube-apiserver:  CPU %.3f cores, RSS %.1f MiB\n", ad/hz/w, ar/1024
    printf "  meganode-store:  CPU %.3f cores, RSS %.1f MiB\n", sd/hz/w, sr/1024
  }'
  echo "  $("$ROOT/docs/bench/kubelets/mem.sh" "$STATE")"
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(free -g | awk '/^Mem/ {print $2}') GiB; N=$N pods/node=$PPN window=${WINDOW}s create qps=$QPS"
echo "\$ meganode up --nodes 0 --kubelets $N --state-dir $STATE"
start=$(date +%s.%N)
"$MEGANODE" up --nodes 0 --kubelets "$N" --state-dir "$STATE" 2>&1 | grep -v '^\s*$' | tail -4
echo "up (all $N nodes Ready and untainted) in $(echo "$(date +%s.%N) - $start" | bc) s"
export KUBECONFIG=$STATE/kubeconfig
sleep 20 # let startup CPU settle
window "idle"
echo "\$ meganode create-pods --count $((N * PPN)) --qps $QPS --state-dir $STATE"
"$MEGANODE" create-pods --count $((N * PPN)) --qps "$QPS" --state-dir "$STATE" 2>&1 | grep -v '^\s*$' | grep -v ' ops/s now'
if [ -n "${REPORT_JSON:-}" ]; then cp "$STATE/report/report.json" "$REPORT_JSON"; fi
sleep 10
window "with $((N * PPN)) pods"
api() { curl -sf --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
  "$(jq -r .apiserver_url "$STATE/state.json")$1"; }
echo "pods Running: $(api "/api/v1/pods?fieldSelector=status.phase=Running" | jq '.items | length')," \
  "nodes Ready: $(api /api/v1/nodes | jq '[.items[] | select(.status.conditions[] | .type == "Ready" and .status == "True")] | length')," \
  "Events: $(api /api/v1/events | jq '.items | length')" \
  "(from kubelets: $(api /api/v1/events | jq '[.items[] | select(.source.component == "kubelet")] | length'))"
echo "\$ meganode down --state-dir $STATE"
"$MEGANODE" down --state-dir "$STATE" 2>&1 | tail -1
left=$(ps -eo pid,args | awk -v s="$STATE" 'index($0, s) && !/awk/' | wc -l)
echo "processes left mentioning $STATE: $left"
