#!/bin/sh
# Full paged lists (limit 500, as kube-apiserver pages) of 200K keys, one lister,
# before (the store at main da9c06e) and after (this branch), then against etcd.
set -x
cd "$(dirname "$0")/../../.."
OUT=docs/bench/paged-count
flock /tmp/heavy.lock bin/meganode bench range --target meganode --keys 200000 --page-limit 500 --clients 1 --rounds 1 --store-bin /tmp/pagecount-before-store > $OUT/before-meganode.txt 2>&1
flock /tmp/heavy.lock bin/meganode bench range --target meganode --keys 200000 --page-limit 500 --clients 1 --rounds 1 --store-bin bin/meganode-store > $OUT/after-meganode.txt 2>&1
flock /tmp/heavy.lock bin/meganode bench range --target both --keys 200000 --page-limit 500 --clients 1 --rounds 1 --store-bin bin/meganode-store > $OUT/after-both.txt 2>&1
# linearity: 2.5× the keys
flock /tmp/heavy.lock bin/meganode bench range --target meganode --keys 500000 --page-limit 500 --clients 1 --rounds 1 --store-bin bin/meganode-store > $OUT/after-meganode-500k.txt 2>&1
