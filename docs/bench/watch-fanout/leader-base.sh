#!/bin/bash
# The leader's and a follower's CPU per write with no watcher at the fan-out bench's write rate
# (200 puts/s of 1 KiB from one client), against a fresh 3-member group on loopback; then the same
# leader profiled with perf (cpu-clock) by thread (PERF=0: not; N puts, IDLE s idle). Run from the repository root:
#   flock /tmp/heavy.lock bash docs/bench/watch-fanout/leader-base.sh > docs/bench/watch-fanout/leader-base.txt 2>&1
set -e
source "$(dirname "$0")/../group-ab/group.sh"
leader=$(bin/etcdctl --endpoints 127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792 endpoint status -w json | python3 -c '
import json,sys
for i,s in enumerate(json.load(sys.stdin)):
    if s["Status"]["leader"]==s["Status"]["header"]["member_id"]: print(i)')
lp=${pids[$leader]}; fp=${pids[$(( (leader+1) % 3 ))]}
echo "store: $B ($(git rev-parse --short HEAD)); leader m$leader; clock ticks per second: $hz"
l0=$(cpu $lp); f0=$(cpu $fp); sleep ${IDLE:-10}; l1=$(cpu $lp); f1=$(cpu $fp)
echo "idle ${IDLE:-10} s: leader $(( (l1-l0)*1000/hz )) ms CPU, follower $(( (f1-f0)*1000/hz )) ms"
n=${N:-4000}
l0=$(cpu $lp); f0=$(cpu $fp)
bin/benchmark --endpoints 127.0.0.1:2379$leader --conns 1 --clients 1 put --rate 200 --total $n --key-size 48 --val-size 1024 2>&1 | grep -E "Total:|Requests/sec"
l1=$(cpu $lp); f1=$(cpu $fp)
echo "$n puts at 200/s: leader $(( (l1-l0)*1000000/hz/n )) µs CPU per write, follower $(( (f1-f0)*1000000/hz/n )) µs"
if [ "${PERF:-1}" = 1 ] && command -v perf >/dev/null; then
  bin/benchmark --endpoints 127.0.0.1:2379$leader --conns 1 --clients 1 put --rate 200 --total 1600 --key-size 48 --val-size 1024 >/dev/null 2>&1 &
  pids+=($!)   # stopped with the members at exit (it holds the caller's lock file open)
  sleep 1
  perf record -q -e cpu-clock -F 4000 -g -p $lp -o $D/perf.data -- sleep 8 >/dev/null 2>&1
  echo "perf (cpu-clock, 8 s of the leader under the same load), by thread:"
  perf report -i $D/perf.data --no-children --sort comm 2>/dev/null | grep -E "^ +[0-9.]+%" | head -5
  echo "by place (kernel symbols are the scheduler's and the sockets'):"
  perf report -i $D/perf.data --no-children --sort dso 2>/dev/null | grep -E "^ +[0-9.]+%" | head -6
  echo "top symbols:"
  perf report -i $D/perf.data --no-children --sort sym 2>/dev/null | grep -E "^ +[0-9.]+%" | head -15
fi
