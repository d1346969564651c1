#!/usr/bin/env python3
"""What one write + fdatasync costs on a disk, by how the file's blocks were made.

usage: disk.py DIR [N] [SIZE]   (DIR on the disk to measure; N writes of SIZE bytes per case)

Cases, alternated over two rounds:
  append     the file grows at every write (what a log without zeros ahead does)
  zero       the whole range was written as zeros and synced first
  falloc     posix_fallocate'd first (unwritten extents)
  keep       fallocate(FALLOC_FL_KEEP_SIZE) first
  ahead-C    what meganode-store does: zeros written ahead C bytes at a time when fewer
             than C/4 are left, in the same cycle (synced by the same fdatasync)
Prints per case: latency p50/p99/p99.9/max and the process's kernel CPU per write+sync.
"""
import ctypes, os, sys, time

libc = ctypes.CDLL("libc.so.6", use_errno=True)
d = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
size = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
ZEROS = b"\0" * (4 << 20)


def run(name, pre=None, chunk=0):
    p = os.path.join(d, "disk-py-" + name)
    if os.path.exists(p):
        os.remove(p)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY)
    total = n * size + (1 << 20)
    if pre == "zero":
        for off in range(0, total, len(ZEROS)):
            os.pwrite(fd, ZEROS, off)
        os.fsync(fd)
    elif pre == "falloc":
        os.posix_fallocate(fd, 0, total)
        os.fsync(fd)
    elif pre == "keep":
        assert libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(total)) == 0
        os.fsync(fd)
    buf = os.urandom(size)
    lat, off, zeroed = [], 0, 0
    c0 = os.times()
    for _ in range(n):
        t = time.perf_counter()
        os.pwrite(fd, buf, off)
        end = off + size
        if chunk and zeroed < end + chunk // 4:
            start = max(zeroed, end)
            os.pwrite(fd, ZEROS[:chunk], start)
            zeroed = start + chunk
        os.fdatasync(fd)
        off = end
        lat.append(time.perf_counter() - t)
    c1 = os.times()
    os.close(fd)
    os.remove(p)
    lat.sort()
    ms = lambda q: lat[min(n - 1, int(n * q))] * 1e3
    print(f"{name:14s} size {size:6d}  p50 {ms(.5):.3f} ms  p99 {ms(.99):.3f}  p99.9 {ms(.999):.3f}  max {lat[-1]*1e3:.3f}  kernel {(c1.system-c0.system)/n*1e6:5.1f} µs/op", flush=True)


for r in range(2):
    print(f"# round {r + 1}")
    for case in ["append", "zero", "falloc", "keep"]:
        run(case, None if case == "append" else case)
    for c in [256 << 10, 1 << 20, 4 << 20]:
        run(f"ahead-{c >> 10}K", chunk=c)
