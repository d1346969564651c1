#!/bin/bash
# Where a replicated group's put costs go: etcd's benchmark put against a fresh 3-member
# meganode-store group, first with the leader as the only endpoint, then with all three
# (two writes in three then reach a follower, which forwards them to the leader over HTTP/2).
# CPU ticks (1/100 s, user+system) of each member from /proc before and after each run.
# Run from the repository root after `make store etcd-benchmark etcdctl`.
set -e
d=$(mktemp -d); trap 'pkill -f "$d/m" || true; rm -rf "$d"' EXIT
ic="m0=http://127.0.0.1:23800,m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802"
for i in 0 1 2; do
  bin/meganode-store --name m$i --data-dir $d/m$i --listen-client-urls http://127.0.0.1:2379$i \
    --listen-peer-urls http://127.0.0.1:2380$i --initial-cluster $ic 2>$d/m$i.log &
done
sleep 2
eps=127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792
leader=$(bin/etcdctl --endpoints $eps endpoint status -w json | python3 -c "import json,sys; d=json.load(sys.stdin); l=d[0]['Status']['leader']; print([x['Endpoint'] for x in d if x['Status']['header']['member_id']==l][0])")
cpu() { for i in 0 1 2; do awk '{printf "%d ", $14+$15}' /proc/$(pgrep -f "$d/m$i ")/stat; done; }
run() {
  local b a; b=$(cpu)
  bin/benchmark --endpoints=$1 --conns=10 --clients=100 put --key-size=8 --val-size=256 --total=20000 --key-space-size=100000 2>&1 | grep -E "Requests/sec|99.9%"
  a=$(cpu); echo "  CPU ticks m0 m1 m2 before: $b after: $a"
}
echo "leader $leader only:"; run $leader
echo "all three endpoints:"; run $eps
