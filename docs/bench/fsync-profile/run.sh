#!/bin/bash
# Where a 3-member group's CPU goes under etcd's benchmark put (100 clients, 256 B values, all
# members as endpoints): per-thread CPU ticks over 5 s, per-thread system call counts (perf stat)
# and a 4 s perf profile (cpu-clock, dwarf call graphs) of the three members; analyze.py sums it.
# Usage, from the repository root: flock /tmp/heavy.lock docs/bench/fsync-profile/run.sh replicated|fsync LABEL OUTDIR
set -e
MODE=$1; L=$2; OUT=$(realpath "$3"); B=${STORE_BIN:-bin/meganode-store}; ROOT=$(pwd)
D=$(mktemp -d)
IC="m0=http://127.0.0.1:23800,m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802"
EXTRA=""; [ "$MODE" = fsync ] && EXTRA="--durability fsync"
pids=()
for i in 0 1 2; do
  $B --name m$i --data-dir $D/d$i --listen-client-urls http://127.0.0.1:2379$i --advertise-client-urls http://127.0.0.1:2379$i \
     --listen-peer-urls http://127.0.0.1:2380$i --initial-advertise-peer-urls http://127.0.0.1:2380$i --initial-cluster $IC $EXTRA > $D/m$i.log 2>&1 &
  pids+=($!)
done
trap 'kill ${pids[@]} 2>/dev/null; rm -rf $D' EXIT
sleep 3
$ROOT/bin/benchmark --endpoints=127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792 --conns=10 --clients=100 \
  put --key-size=8 --val-size=256 --total=400000 --key-space-size=100000 > $OUT/bench-$L.txt 2>&1 &
bp=$!
sleep 4
snap() { for p in ${pids[@]}; do for t in /proc/$p/task/*; do echo "$p $(tr ' ' _ < $t/comm) $(awk '{print $14+$15}' $t/stat)"; done; done; }
snap > $OUT/ticks0-$L.txt
perf stat -e syscalls:sys_enter_fdatasync,syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait \
  -p $(IFS=,; echo "${pids[*]}") --per-thread -o $OUT/syscalls-$L.txt -- sleep 5
snap > $OUT/ticks1-$L.txt
perf record -e cpu-clock -F 500 --call-graph dwarf,16384 -o $D/perf.data -p $(IFS=,; echo "${pids[*]}") -- sleep 4 2>$D/perf-record.log
wait $bp
perf script -i $D/perf.data -F pid,tid,ip,sym 2>$D/perf-script.log | python3 $ROOT/docs/bench/fsync-profile/analyze.py $OUT/ticks0-$L.txt $OUT/ticks1-$L.txt $OUT/bench-$L.txt > $OUT/profile-$L.txt
grep -q "samples.*: 0$" $OUT/profile-$L.txt && tail -3 $D/perf-record.log $D/perf-script.log
cat $OUT/profile-$L.txt
