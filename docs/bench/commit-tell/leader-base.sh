#!/bin/bash
# The leader's and a follower's CPU per write with no watcher at the fan-out bench's write rate
# (200 puts/s of 1 KiB from one client), against a fresh 3-member group on loopback; then the same
# leader profiled with perf (cpu-clock) by thread. Run from the repository root:
#   flock /tmp/heavy.lock bash docs/bench/watch-fanout/leader-base.sh > docs/bench/watch-fanout/leader-base.txt 2>&1
set -e
B=${STORE_BIN:-bin/meganode-store}
D=$(mktemp -d)
IC="m0=http://127.0.0.1:23800,m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802"
pids=()
for i in 0 1 2; do
  $B --name m$i --data-dir $D/d$i --listen-client-urls http://127.0.0.1:2379$i --advertise-client-urls http://127.0.0.1:2379$i \
     --listen-peer-urls http://127.0.0.1:2380$i --initial-advertise-peer-urls http://127.0.0.1:2380$i --initial-cluster $IC \
     > $D/m$i.log 2>&1 &
  pids+=($!)
done
trap 'kill ${pids[@]} 2>/dev/null; rm -rf $D' EXIT
sleep 3
leader=$(bin/etcdctl --endpoints 127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792 endpoint status -w json | python3 -c '
import json,sys
for i,s in enumerate(json.load(sys.stdin)):
    if s["Status"]["leader"]==s["Status"]["header"]["member_id"]: print(i)')
lp=${pids[$leader]}; fp=${pids[$(( (leader+1) % 3 ))]}
cpu() { awk '{print $14+$15}' /proc/$1/stat; }   # user+system clock ticks
hz=$(getconf CLK_TCK)
echo "store: $B ($(git rev-parse --short HEAD)); leader m$leader; clock ticks per second: $hz"
l0=$(cpu $lp); f0=$(cpu $fp); sleep 2; l1=$(cpu $lp); f1=$(cpu $fp)
echo "idle 10 s: leader $(( (l1-l0)*1000/hz )) ms CPU, follower $(( (f1-f0)*1000/hz )) ms"
n=${N:-3000}
l0=$(cpu $lp); f0=$(cpu $fp)
bin/benchmark --endpoints 127.0.0.1:2379$leader --conns 1 --clients 1 put --rate 200 --total $n --key-size 48 --val-size 1024 2>&1 | grep -E "Total:|Requests/sec"
l1=$(cpu $lp); f1=$(cpu $fp)
echo "$n puts at 200/s: leader $(( (l1-l0)*1000000/hz/n )) µs CPU per write, follower $(( (f1-f0)*1000000/hz/n )) µs"
