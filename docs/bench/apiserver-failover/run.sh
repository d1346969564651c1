#!/usr/bin/env bash
# The runs behind README.md: `bench apiserver-failover` at 1,000 KWOK nodes on meganode-store
# (the committed run, then two repeats: what the kill catches in flight differs run to run),
# and the same against a 3-member etcd 3.6 group. Each run's stdout, stderr and command are
# kept beside its output. Run from the repository root after `make meganode k8s-bins`.
set -u
out=docs/bench/apiserver-failover
one() { # DIR ARGS…
	local dir=$1; shift
	mkdir -p "$dir"
	echo "flock /tmp/heavy.lock ./bin/meganode bench apiserver-failover $*   # at $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) cores" >"$dir/command.txt"
	flock /tmp/heavy.lock ./bin/meganode bench apiserver-failover "$@" >"$dir/stdout.txt" 2>"$dir/stderr.txt"
	echo "exit $?" >>"$dir/command.txt"
}
one "$out" --nodes 1000 --out "$out"
one "$out/repeat-2" --nodes 1000 --out "$out/repeat-2"
one "$out/repeat-3" --nodes 1000 --out "$out/repeat-3"
one "$out/etcd" --store etcd --nodes 1000 --out "$out/etcd"
