#!/bin/bash
# Per-thread CPU and context switches per put of a standalone store under `meganode bench put`
# (from /proc/<pid>/task/*/{stat,status}, before and after a 10 s run).
# usage: docs/bench/wal-zeros-2026-11-28/threads.sh LABEL "STORE ARGS" CLIENTS   (from the repo root;
#        STORE=path picks the store binary, default bin/meganode-store)
set -e
label=$1; sargs=$2; clients=$3
out=/tmp/threads-$label; d=bin/bench-disk/threads-$label
rm -rf $d $out; mkdir -p $d
${STORE:-bin/meganode-store} --data-dir $d --listen-client-urls http://127.0.0.1:23790 \
  --advertise-client-urls http://127.0.0.1:23790 $sargs > /dev/null 2>&1 &
s=$!
trap 'kill $s 2>/dev/null; wait $s 2>/dev/null; rm -rf $d' EXIT
sleep 1.5
snap() {
  for t in /proc/$s/task/*; do
    echo "$(cat $t/comm) $(awk '/^voluntary_ctxt_switches/{v=$2} /^nonvoluntary_ctxt_switches/{n=$2} END{print v, n}' $t/status) $(awk '{print $14, $15}' $t/stat)"
  done | awk '{v[$1]+=$2; n[$1]+=$3; u[$1]+=$4; s[$1]+=$5} END{for (k in v) print k, v[k], n[k], u[k], s[k]}' | sort
}
snap > $out.0
bin/meganode bench put --target meganode --endpoints 127.0.0.1:23790 --server-pid $s --clients $clients \
  --duration 10s --quiet --out $out > /dev/null 2>&1
snap > $out.1
python3 - "$out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))['runs'][0]; l = r['latency']
print(f"ops/s {r['ops_per_sec']/1e3:.1f}K p50 {l['p50_us']/1e3:.2f} p99 {l['p99_us']/1e3:.2f} p99.9 {l['p999_us']/1e3:.2f} max {l['max_us']/1e3:.2f} ms | server {r['server_cpu_per_op_us']:.1f} µs/op")
PY
ops=$(python3 -c "import json;print(json.load(open('$out/results.json'))['runs'][0]['ops'])")
# clock ticks are 10 ms (USER_HZ 100): 1e4 µs per tick
join $out.0 $out.1 | awk -v ops=$ops '{printf "  %-16s voluntary/op %.3f involuntary/op %.3f user %.2f sys %.2f µs/op\n", $1, ($6-$2)/ops, ($7-$3)/ops, ($8-$4)*10000/ops, ($9-$5)*10000/ops}'
