# Sourced by the group benchmarks' scripts: a fresh 3-member meganode-store group on loopback
# (client ports 23790-23792, peer ports 23800-23802) from $STORE_BIN (default bin/meganode-store),
# stopped and its data removed at exit; `pids` holds the members' process IDs, `cpu PID` a
# process's user+system clock ticks, `hz` the ticks per second.
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
cpu() { awk '{print $14+$15}' /proc/$1/stat; }   # user+system clock ticks
hz=$(getconf CLK_TCK)
