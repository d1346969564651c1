#!/bin/bash
# LeaseGrants beside reads (issue 12, "no stalls"): one runtime worker, every log fsync delayed 100 ms
# (--test-fault-fsync-latency), --durability fsync; 40 `etcdctl lease grant` one after another while
# etcd's benchmark reads one key (serializable) from 10 clients. Usage: run.sh STORE_BINARY LABEL
bin=$1; label=$2; port=$((21000 + RANDOM % 1000)); d=$(mktemp -d /dev/shm/lg-XXXX)
$bin --data-dir $d --listen-client-urls http://127.0.0.1:$port --durability fsync --runtime-workers 1 --test-fault-fsync-latency 100ms > /tmp/lg-$label.log 2>&1 &
pid=$!; sleep 1
bin/etcdctl --endpoints 127.0.0.1:$port put /k v >/dev/null
( for i in $(seq 40); do bin/etcdctl --endpoints 127.0.0.1:$port lease grant 60 >/dev/null; done ) &
g=$!
bin/benchmark --endpoints 127.0.0.1:$port --clients 10 --conns 2 range /k --total 20000 --consistency s 2>&1 | grep -E "Slowest|99.9%|Requests/sec" | tr -s ' ' | tr '\n' ' '
echo " [$label]"
wait $g; kill $pid; wait $pid 2>/dev/null; rm -rf $d
