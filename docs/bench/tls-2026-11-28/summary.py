#!/usr/bin/env python3
"""Per-round table of run.sh's raw outputs: throughput, server CPU per put (µs, from the CPU
ticks over TOTAL puts), p99.9 and slowest (ms), peak RSS (MiB); then each side's medians and
their ratio to etcd's. Usage: summary.py DIR [DIR...] (DIR: a run.sh OUTDIR)."""
import glob, os, re, statistics, sys

def read(path):
    t = open(path, errors="replace").read()
    f = lambda pat: float(re.search(pat, t).group(1))
    ticks, tck, rss = f(r"server_cpu_ticks=(\d+)"), f(r"clk_tck=(\d+)"), f(r"peak_rss_kib=(\d+)")
    rps, secs = f(r"Requests/sec:\s+([\d.]+)"), f(r"Total:\s+([\d.]+) secs")
    puts = rps * secs
    return {"rps": rps, "cpu_us": ticks / tck * 1e6 / puts, "p999": f(r"99\.9% in ([\d.]+) secs") * 1e3,
            "max": f(r"Slowest:\s+([\d.]+) secs") * 1e3, "rss": rss / 1024}

for d in sys.argv[1:]:
    print(f"## {d}")
    sides = {}
    for p in sorted(glob.glob(os.path.join(d, "*-[0-9]*.txt"))):
        if p.endswith(".server.log"):
            continue
        side, rnd = os.path.basename(p)[:-4].rsplit("-", 1)
        sides.setdefault(side, []).append((int(rnd), read(p)))
    print("side      round  puts/s   µs/put  p99.9 ms  max ms  RSS MiB")
    for side, rows in sides.items():
        for rnd, r in sorted(rows):
            print(f"{side:9} {rnd:5} {r['rps']:8.0f} {r['cpu_us']:8.1f} {r['p999']:9.1f} {r['max']:7.1f} {r['rss']:8.0f}")
    med = {s: {k: statistics.median(r[k] for _, r in rows) for k in rows[0][1]} for s, rows in sides.items()}
    print("medians, and ratio to etcd's:")
    for side, m in med.items():
        e = med.get("etcd")
        ratio = lambda k: f" ({m[k] / e[k]:.3f}×)" if e else ""
        print(f"{side:9} puts/s {m['rps']:.0f}{ratio('rps')}  µs/put {m['cpu_us']:.1f}{ratio('cpu_us')}  p99.9 {m['p999']:.1f}{ratio('p999')}  max {m['max']:.1f}{ratio('max')}  RSS {m['rss']:.0f}{ratio('rss')}")
    print()
