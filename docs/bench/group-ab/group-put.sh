#!/bin/bash
# A fresh 3-member group (group.sh), etcd's benchmark put at 100 clients over 10 connections given
# all three members (48 B keys over 100K, 1 KiB values, $N puts, default 200,000): the throughput,
# p99.9 and the members' summed CPU per put. From the repository root.
set -e
source "$(dirname "$0")/group.sh"
n=${N:-200000}
c0=0; for p in ${pids[@]}; do c0=$((c0+$(cpu $p))); done
bin/benchmark --endpoints 127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792 --clients 100 --conns 10 put --key-size 48 --key-space-size 100000 --val-size 1024 --total $n 2>&1 | grep -E "Requests/sec|99.9%"
c1=0; for p in ${pids[@]}; do c1=$((c1+$(cpu $p))); done
echo "server CPU per put (3 members): $(( (c1-c0)*1000000/hz/n )) µs"
