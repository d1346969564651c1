#!/bin/sh
# etcd's own `benchmark put` over mutual TLS (the shape kube-apiserver runs against etcd in
# production): meganode-store (its defaults) and real etcd 3.6 (`meganode etcd`), both with their
# data on /dev/shm, both with --client-cert-auth; BEFORE=<an older meganode-store binary> adds it as
# a third side. Alternated, ROUNDS rounds each; 10 connections, 48 B keys, 1 KiB values, TOTAL puts
# over 100K keys, CLIENTS clients. Server CPU per put is utime+stime from /proc/<pid>/stat before
# and after the run; peak RSS is VmHWM. The certificates (ECDSA P-256, server SAN 127.0.0.1,
# client CN root) are made with openssl in OUTDIR/certs.
# Usage: docs/bench/tls-2026-11-28/run.sh OUTDIR   (from the repository root, after `make build etcd-benchmark`)
set -e
out=${1:?out dir}; mkdir -p "$out/certs"
ROUNDS=${ROUNDS:-3}; CLIENTS=${CLIENTS:-100}; TOTAL=${TOTAL:-200000}
c=$out/certs
key() { openssl ecparam -name prime256v1 -genkey -noout -out $1 2>/dev/null; }
key $c/ca.key
openssl req -x509 -new -key $c/ca.key -subj /CN=bench-ca -days 2 -out $c/ca.pem 2>/dev/null
key $c/server.key
openssl req -new -key $c/server.key -subj /CN=server -out $c/server.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > $c/server.ext
openssl x509 -req -in $c/server.csr -CA $c/ca.pem -CAkey $c/ca.key -CAcreateserial -days 2 -extfile $c/server.ext -out $c/server.pem 2>/dev/null
key $c/client.key
openssl req -new -key $c/client.key -subj /CN=root -out $c/client.csr 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > $c/client.ext
openssl x509 -req -in $c/client.csr -CA $c/ca.pem -CAkey $c/ca.key -CAcreateserial -days 2 -extfile $c/client.ext -out $c/client.pem 2>/dev/null
tlsflags="--cert-file $c/server.pem --key-file $c/server.key --trusted-ca-file $c/ca.pem --client-cert-auth"
client="--cacert $c/ca.pem --cert $c/client.pem --key $c/client.key"
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
one() { # target round
  t=$1; r=$2; d=$(mktemp -d /dev/shm/tlsbench-$t-XXXX); port=$((20000 + $$ % 10000))
  case $t in
    meganode) bin/meganode-store --data-dir $d --listen-client-urls https://127.0.0.1:$port $tlsflags > $out/$t-$r.server.log 2>&1 & ;;
    before) $BEFORE --data-dir $d --listen-client-urls https://127.0.0.1:$port $tlsflags > $out/$t-$r.server.log 2>&1 & ;;
    etcd) bin/meganode etcd --data-dir $d --listen-client-urls https://127.0.0.1:$port $tlsflags > $out/$t-$r.server.log 2>&1 & ;;
  esac
  pid=$!
  for i in $(seq 100); do bin/benchmark --endpoints https://127.0.0.1:$port $client --clients 1 --conns 1 put --total 1 >/dev/null 2>&1 && break; sleep 0.1; done
  c0=$(cpu $pid)
  bin/benchmark --endpoints https://127.0.0.1:$port $client --clients $CLIENTS --conns 10 put --key-size 48 --val-size 1024 \
    --key-space-size 100000 --total $TOTAL > $out/$t-$r.txt 2>&1
  c1=$(cpu $pid); hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
  kill $pid; wait $pid 2>/dev/null || true; rm -rf $d
  echo "server_cpu_ticks=$((c1 - c0)) clk_tck=$tick cpu_us_per_put=$(( (c1 - c0) * 1000000 / tick / TOTAL )) peak_rss_kib=$hwm" >> $out/$t-$r.txt
  echo "$t round $r: $(grep -E 'Requests/sec' $out/$t-$r.txt | tr -s ' ') $(tail -1 $out/$t-$r.txt)"
}
for r in $(seq $ROUNDS); do
  one meganode $r
  if [ -n "$BEFORE" ]; then one before $r; fi
  one etcd $r
done
