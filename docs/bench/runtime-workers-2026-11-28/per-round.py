#!/usr/bin/env python3
"""Per-round p99.9 / max (ms), server CPU per op (µs) and throughput of bench result dirs."""
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f + '/results.json'))
    rows = {}
    for r in d['runs']:
        l = r['latency']
        rows.setdefault((r['target'], r['clients']), []).append('%5.1f /%6.1f / %5.1f / %5.1fK' % (l['p999_us'] / 1e3, l['max_us'] / 1e3, r['server_cpu_per_op_us'], r['ops_per_sec'] / 1e3))
    for (t, c), v in rows.items():
        print(f'{f.split("/")[-1]:22s} {t:8s} {c:5d}  ' + ' | '.join(v))
