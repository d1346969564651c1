#!/bin/bash
# 3-member group on loopback, etcd benchmark put (100 clients, 10 conns, 48 B keys over 100K, 1 KiB values);
# server CPU per put summed over the members.
set -e
cd /work/main
B=${STORE_BIN:-bin/meganode-store}
D=$(mktemp -d)
IC="m0=http://127.0.0.1:23800,m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802"
pids=()
for i in 0 1 2; do
  $B --name m$i --data-dir $D/d$i --listen-client-urls http://127.0.0.1:2379$i --advertise-client-urls http://127.0.0.1:2379$i \
     --initial-cluster $IC --listen-peer-urls http://127.0.0.1:2380$i > $D/m$i.log 2>&1 &
  pids+=($!)
done
trap 'kill ${pids[@]} 2>/dev/null; rm -rf $D' EXIT
sleep 3
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
hz=$(getconf CLK_TCK)
n=${N:-200000}
c0=0; for p in ${pids[@]}; do c0=$((c0+$(cpu $p))); done
bin/benchmark --endpoints 127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792 --clients 100 --conns 10 put --key-size 48 --key-space-size 100000 --val-size 1024 --total $n 2>&1 | grep -E "Requests/sec|99.9%"
c1=0; for p in ${pids[@]}; do c1=$((c1+$(cpu $p))); done
echo "server CPU per put (3 members): $(( (c1-c0)*1000000/hz/n )) µs"
