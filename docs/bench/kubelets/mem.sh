#!/usr/bin/env bash
# RSS, PSS and private memory (Private_Clean + Private_Dirty) per hollow kubelet of a running
# `up --kubelets` cluster, from /proc/<pid>/smaps_rollup. RSS counts the kubemark binary's
# text pages in every process; PSS and private memory are what each one adds.
# Usage: mem.sh [STATE_DIR]
S=${1:-/tmp/meganode-kubelets-bench}
n=0; rss=0; pss=0; priv=0
for p in $(jq -r '.components[] | select(.kind == "kubemark") | .pid' "$S/state.json"); do
  set -- $(awk '/^Rss:/ {r = $2} /^Pss:/ {s = $2} /^Private_Clean:/ {c = $2} /^Private_Dirty:/ {d = $2} END {print r + 0, s + 0, c + d}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0 0 0)
  rss=$((rss + $1)); pss=$((pss + $2)); priv=$((priv + $3)); n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "no hollow kubelets in $S"; exit 1; }
echo "$(date -u +%FT%TZ) $n hollow kubelets: per node RSS $((rss / n / 1024)) MiB, PSS $((pss / n / 1024)) MiB, private $((priv / n / 1024)) MiB;" \
  "total RSS $((rss / 1024)) MiB, PSS $((pss / 1024)) MiB, private $((priv / 1024)) MiB; $(free -m | awk '/^Mem/ {print "host used " $3 " MiB of " $2}')"
