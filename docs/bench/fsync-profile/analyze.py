#!/usr/bin/env python3
"""Sums `perf script -F pid,tid,ip,sym` (stdin) of a group's members: CPU per put from the thread
ticks, the share of each part of the write path per member, and what the raft log's disk writes cost.
Usage: perf script ... | analyze.py TICKS0 TICKS1 BENCH_OUTPUT"""
import collections, re, sys

def ticks(path):
    d = collections.Counter()
    for line in open(path):
        pid, comm, t = line.split()
        d[(pid, comm.split('-')[0])] += int(t)
    return d

t0, t1 = ticks(sys.argv[1]), ticks(sys.argv[2])
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", open(sys.argv[3]).read()).group(1))
total = sum(t1[k] - t0[k] for k in t1)  # clock ticks (100/s) over the 5 s window
print(f"puts/s {rate:.0f}; members' CPU over 5 s: {total / 100:.2f} s = {total / 100 / 5 / rate * 1e6:.1f} µs per put")
for k in sorted(t1):
    if t1[k] - t0[k] > 0:
        print(f"  pid {k[0]} {k[1]:16s} {(t1[k] - t0[k]) / 100:.2f} s")

stacks, pid, frames = collections.Counter(), None, []
def flush():
    if pid is not None:
        stacks[(pid, tuple(reversed(frames)))] += 1
for line in sys.stdin:
    if not line.strip():
        flush(); pid, frames = None, []
    elif not line.startswith((' ', '\t')):
        pid = line.split()[0].split('/')[0]
    else:
        parts = line.strip().split(None, 1)
        frames.append(re.sub(r' \(inlined\)$', '', re.sub(r'\+0x[0-9a-f]+$', '', parts[1] if len(parts) > 1 else '?')))
flush()

PARTS = [("raft thread: apply", "Driver::apply"), ("raft thread: send to peers", "Driver::send"),
         ("raft thread: raft log on disk", "disk_log"), ("raft thread: step", "Driver::step"),
         ("raft thread: propose", "propose"), ("raft thread: other Ready work", "Driver::on_ready"),
         ("raft thread: loop, channel wait", "Driver::run"), ("peer frames read", "replication::peer::serve"),
         ("forwarded calls served (leader)", "transport::forward::serve"), ("forward link writer", "transport::forward::spawn_writer"),
         ("forward link (follower)", "transport::forward::Link"), ("forward call (follower)", "transport::forward::call"),
         ("put on the store", "Store::put_value"), ("client HTTP/2 read", "Conn<T>::read_frames"),
         ("client HTTP/2 connection", "conn::Conn<T> as core::future"), ("tokio park (epoll, timers)", "park"),
         ("tokio other", "tokio::runtime")]
all_samples = sum(stacks.values())
print(f"\nperf samples (500/s, 4 s): {all_samples}")
for p in sorted({p for p, _ in stacks}):
    n = sum(c for (q, _), c in stacks.items() if q == p)
    parts = collections.Counter()
    for (q, s), c in stacks.items():
        if q == p:
            parts[next((name for name, sub in PARTS if any(sub in f for f in s)), "other")] += c
    print(f"pid {p}: {n} samples")
    for name, c in parts.most_common():
        print(f"  {100 * c / n:5.1f}%  {name}")

disk = collections.Counter()
for (_, s), c in stacks.items():
    idx = [i for i, f in enumerate(s) if 'disk_log' in f]
    if idx:
        below = s[idx[-1] + 1] if idx[-1] + 1 < len(s) else '(itself)'
        disk['fdatasync' if 'sync_data' in below else 'write' if 'write_all' in below else 'encode, crc, checks'] += c
    k = [i for i, f in enumerate(s) if '__x64_sys_fdatasync' in f]
    if k:
        inner = ' > '.join(s[k[-1] + 1:])
        disk['  in fdatasync: ' + ('data pages written back' if 'file_write_and_wait_range' in inner else
                                   'inode written (size changed)' if 'ext4_write_inode' in inner else
                                   'metadata buffers' if 'fsync_buffers_list' in inner else
                                   'device cache flush' if 'blkdev_issue_flush' in inner else 'other')] += c
if disk:
    print(f"\nraft log on disk, all members: {100 * sum(c for k, c in disk.items() if not k.startswith(' ')) / all_samples:.1f}% of all samples")
    for k, c in sorted(disk.items(), key=lambda kv: (kv[0].startswith(' '), -kv[1])):
        print(f"  {100 * c / all_samples:5.1f}%  {k.strip()}")
