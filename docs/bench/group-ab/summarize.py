#!/usr/bin/env python3
"""Medians per variant from DIR/output.txt (an A/B run.sh's raw output) → DIR/summary.txt.
Usage: summarize.py DIR "what base is" "what new is"."""
import re, statistics, pathlib, sys
here = pathlib.Path(sys.argv[1])
cur, vals = None, {}
for line in (here / "output.txt").read_text().splitlines():
    m = re.match(r"== (\w+) round", line)
    if m:
        cur = m.group(1)
        continue
    for key, pat in (("leader µs/write at 200/s", r"leader (\d+) µs"), ("follower µs/write at 200/s", r"follower (\d+) µs"),
                     ("group µs/put at 100 clients", r"3 members\): (\d+) µs"), ("group puts/s at 100 clients", r"Requests/sec:\s+(\d{4,}\.\d+)")):
        m = re.search(pat, line)
        if m:
            vals.setdefault(key, {}).setdefault(cur, []).append(float(m.group(1)))
out = [f"medians of the rounds in output.txt (base: {sys.argv[2]}, new: {sys.argv[3]})"]
for key, by in vals.items():
    b, n = statistics.median(by["base"]), statistics.median(by["new"])
    out.append(f"{key:32s} base {b:10.1f}  new {n:10.1f}  new/base {n / b:.3f}")
(here / "summary.txt").write_text("\n".join(out) + "\n")
print("\n".join(out))
