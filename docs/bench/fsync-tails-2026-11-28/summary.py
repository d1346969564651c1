#!/usr/bin/env python3
"""Per round of run.sh: throughput, p99.9 and slowest put (ms) from etcd's benchmark, and the
bucket (ms) of the server's slowest WAL fsync in that run, with how many fsyncs took over 64 ms (a bucket bound in both).
Usage: summary.py OUTDIR"""
import glob, os, re, sys

def hist(path):
    h = {}
    for line in open(path):
        le, n = line.split()
        h[float("inf") if le == "+Inf" else float(le)] = float(n)
    return h

d = sys.argv[1]
print("side      round   puts/s  p99.9 ms  slowest ms  slowest fsync in (ms)  fsyncs > 64 ms  fsyncs")
for p in sorted(glob.glob(os.path.join(d, "*-[0-9]*.txt")), key=lambda p: (int(p.rsplit("-", 1)[1][:-4]), p)):
    side, rnd = os.path.basename(p)[:-4].rsplit("-", 1)
    t = open(p, errors="replace").read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
    p999 = float(re.search(r"99\.9% in ([\d.]+) secs", t).group(1)) * 1e3
    slow = float(re.search(r"Slowest:\s+([\d.]+) secs", t).group(1)) * 1e3
    b, a = hist(p[:-4] + ".fsync-before"), hist(p[:-4] + ".fsync-after")
    grew = {le: a[le] - b.get(le, 0) for le in a}
    total = grew[float("inf")]
    # the smallest bucket holding every fsync of the run: the slowest is above the one before it
    les = sorted(grew)
    top = next(le for le in les if grew[le] == total)
    below = max([le for le in les if le < top], default=0)
    over50 = total - max((grew[le] for le in les if le <= 0.064), default=0)
    rng = f"{below * 1e3:.0f}–{top * 1e3:.0f}" if top != float("inf") else f"> {below * 1e3:.0f}"
    print(f"{side:9} {rnd:5} {rps:8.0f} {p999:9.1f} {slow:11.1f} {rng:>22} {over50:15.0f} {total:7.0f}")
