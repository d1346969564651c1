#!/bin/sh
# A/B of the transports: the same store binary with --grpc-transport=tonic and =lean, and etcd 3.6,
# alternated, for put (buffered), get-missing, status, lease-flood (100 and 1000 clients) and watch.
B=/work/main/bin/meganode; S=${S:-/tmp/s14/store-lean}; out=${OUT:-/tmp/b12/all}; mkdir -p $out
run() { # workload target label extra...
  w=$1; t=$2; i=$3; shift 3
  if [ $t = etcd ]; then tg="--target etcd"; else tg="--target meganode --store-bin $S --store-args=--grpc-transport=$t"; fi
  flock /tmp/heavy.lock $B bench $w --duration 10s --rounds 1 $tg --conns 10 "$@" --out $out/$w-$t-$i > $out/$w-$t-$i.log 2>&1
}
for i in 1 2; do
  for t in tonic lean etcd; do run put $t $i --clients 100,1000 --key-size 48 --val-size 1024 --key-space-size 100000; done
  for t in tonic lean etcd; do run get-missing $t $i --clients 100,1000; done
  for t in tonic lean etcd; do run status $t $i --clients 100,1000; done
  for t in tonic lean etcd; do run lease-flood $t $i --clients 100,1000 --leases 10000; done
  for t in tonic lean etcd; do run watch $t $i --clients 100 --watchers 10 --val-size 1024; done
done
echo ALLDONE
