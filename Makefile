# meganode — build, test and demo. Every target installs what it needs on a fresh Debian machine.
SHELL := /bin/bash
GO ?= go
# Go builds and tests without cgo: static binaries (the meganode image takes bin/meganode's build as it is)
# and one build cache shared by bin/meganode, the Kubernetes binaries, the tests and the image, instead of
# a second compile of every package for the image. The race-detector run below needs cgo and sets it.
export CGO_ENABLED ?= 0
CARGO ?= cargo
BIN := $(CURDIR)/bin
STORE_BIN := $(BIN)/meganode-store
MEGANODE_BIN := $(BIN)/meganode
export MEGANODE_STORE_BIN := $(STORE_BIN)
# The differential test's operation count; `make test-long` raises it.
DIFF_OPS ?= 24000

.PHONY: all deps store meganode build test test-store test-go test-long test-k8s demo bench clean etcdctl

all: build

# protoc is needed by the etcd-client crate's build script (it generates the gRPC stubs).
deps:
	@command -v protoc >/dev/null || { echo "installing protobuf-compiler"; \
	  (apt-get update -qq && apt-get install -y -qq protobuf-compiler) >/dev/null; }
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup)"; exit 1; }
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }

store: deps
	cd store && $(CARGO) build --release --locked --quiet
	@mkdir -p $(BIN) && cp --remove-destination store/target/release/meganode-store $(STORE_BIN)

meganode: deps
	@mkdir -p $(BIN)
	$(GO) build -ldflags '-X main.version=$(IMAGE_TAG)' -o $(MEGANODE_BIN) ./cmd/meganode

build: store meganode

test: build test-store test-go

test-store: deps
	cd store && $(CARGO) test --release --locked

test-go: build
	$(GO) vet ./...
	MEGANODE_DIFF_OPS=$(DIFF_OPS) $(GO) test -count=1 -timeout 40m ./...
	# The scheduler's parallel pods, batches and scatter under the race detector (a shard's workers
	# must never double-book a node).
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 10m -run 'TestParallelPods|TestBatch|TestScatter|TestCollectorWidens|TestPickShards' ./internal/scheduler/...

# Kubernetes' own storage integration tests against meganode-store: `make test` runs the
# k8s.io/kubernetes/test/integration/etcd part; this adds the apiserver list/watch subset, and
# kube-apiserver on a full store (--quota-backend-bytes) against the same on etcd (test/k8s/quota_test.go).
test-k8s: build k8s-bins
	MEGANODE_K8S_FULL=1 $(GO) test -count=1 -timeout 60m -v -run TestKubernetesIntegration ./test/k8s/

# The linearizability check's load (test/e2e/linearizability): 8 clients for LIN_DURATION with LIN_RESTARTS
# SIGKILL restarts; `make test` runs 3 s with 2. Both are strict: a read or watch event of a write a
# kill then lost fails them (test/e2e/linearizability/README.md). The 3-member group's run (leader killed,
# leader cut off by a peer proxy, follower restarted, in turn) takes 8 s with 3 faults, and LIN_DURATION_LONG
# with LIN_RESTARTS_LONG faults in test-long.
LIN_DURATION_LONG ?= 60s
LIN_RESTARTS_LONG ?= 10
test-long: build
	MEGANODE_DIFF_OPS=200000 MEGANODE_LIN_DURATION=$(LIN_DURATION_LONG) MEGANODE_LIN_RESTARTS=$(LIN_RESTARTS_LONG) \
	  MEGANODE_LIN_GROUP_DURATION=$(LIN_DURATION_LONG) MEGANODE_LIN_GROUP_FAULTS=$(LIN_RESTARTS_LONG) $(GO) test -count=1 -timeout 120m ./test/e2e/...

# The cluster demo shows what meganode gains: `meganode up` with the product (meganode-store + the meganode
# scheduler), DEMO_NODES KWOK nodes, DEMO_PODS pods created at 50/s under measurement, a drain of DEMO_DRAIN_PODS
# pods (scheduler paused, then resumed: pods/s, scheduler CPU per pod), down; then the same with the stock stack
# (etcd v3.6 + kube-scheduler); one table of both with the ratios, and comparison.json. DEMO_COMPARE=0 runs the
# meganode stack only (its SLO report; --compare takes 0/1 or false/true). About 2 minutes on 2 cores after the first build.
DEMO_NODES ?= 1000
DEMO_PODS ?= 1000
DEMO_DRAIN_PODS ?= 1000
DEMO_COMPARE ?= 1
DEMO_FLAGS ?=
demo: build k8s-bins
	$(MEGANODE_BIN) demo --nodes $(DEMO_NODES) --pods $(DEMO_PODS) --drain-pods $(DEMO_DRAIN_PODS) \
	  --compare=$(DEMO_COMPARE) $(DEMO_FLAGS)

# The earlier store-only demo (a few seconds of each workload against meganode-store alone).
demo-store: build
	$(MEGANODE_BIN) demo --store-only --store-bin $(STORE_BIN)

# The standard side-by-side comparison with real etcd (v3.6, started by `meganode etcd`, data on tmpfs):
# put (buffered) swept over clients, the floor beside it (get-missing and status: unary RPCs with no store work,
# so put's server CPU splits into transport and store), lease-flood, watch, and put with --durability=fsync against etcd with its
# data on the same disk (BENCH_FSYNC=0 skips it), and memory after BENCH_MEMORY_KEYS Lease-sized keys × 10 updates,
# compacted (BENCH_MEMORY_KEYS=0 skips it; 1M takes ~8 min, mostly etcd), and `bench state` (issue 14) with BENCH_STATE_NODES
# nodes + as many pods and leases loaded, listed, watched and restarted (default 0 = skipped; 100000 takes ~4 min, its memory
# ~3 GiB for etcd on tmpfs, 300000 three times that). Writes docs/benchmarks.md and docs/bench/ from the JSON results.
# Then `bench apiserver-failover` (issue 36): kube-apiserver on a 3-member store group with BENCH_APIFAILOVER_NODES KWOK
# nodes, the store's leader SIGKILLed while pods are created at 20/s, 30 s windows before and after (0 skips it; it
# needs `make k8s-bins`; about 3 minutes at 100 nodes); its output goes to BENCH_APIFAILOVER_OUT, not into the report.
BENCH_DURATION ?= 10s
BENCH_ROUNDS ?= 3
BENCH_FSYNC ?= 1
BENCH_MEMORY_KEYS ?= 1000000
BENCH_STATE_NODES ?= 0
BENCH_OUT ?= $(BIN)/bench-results
BENCH_DISK_DIR ?= $(BIN)/bench-disk
BENCH_APIFAILOVER_NODES ?= 100
BENCH_APIFAILOVER_OUT ?= $(BIN)/bench-apiserver-failover
BENCH_FLAGS = --duration $(BENCH_DURATION) --rounds $(BENCH_ROUNDS) --target both
bench: build $(if $(filter-out 0,$(BENCH_APIFAILOVER_NODES)),k8s-bins)
	@rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT) $(BENCH_DISK_DIR)
	-$(MEGANODE_BIN) bench put $(BENCH_FLAGS) --label buffered --clients 1,16,100,1000 --conns 10 \
	  --key-size 48 --val-size 1024 --key-space-size 100000 --store-args=--durability=buffered --out $(BENCH_OUT)/put-buffered
	-$(MEGANODE_BIN) bench put $(BENCH_FLAGS) --tls --label buffered --clients 100,1000 --conns 10 \
	  --key-size 48 --val-size 1024 --key-space-size 100000 --store-args=--durability=buffered --out $(BENCH_OUT)/put-buffered-tls
	-$(MEGANODE_BIN) bench get-missing $(BENCH_FLAGS) --clients 100,1000 --conns 10 --out $(BENCH_OUT)/get-missing
	-$(MEGANODE_BIN) bench status $(BENCH_FLAGS) --clients 100,1000 --conns 10 --out $(BENCH_OUT)/status
	-$(MEGANODE_BIN) bench lease-flood $(BENCH_FLAGS) --clients 100,1000 --conns 10 --leases 10000 --out $(BENCH_OUT)/lease-flood
	-$(MEGANODE_BIN) bench watch $(BENCH_FLAGS) --clients 100 --conns 10 --watchers 10 --val-size 1024 --out $(BENCH_OUT)/watch
	-if [ "$(BENCH_FSYNC)" = 1 ]; then $(MEGANODE_BIN) bench put $(BENCH_FLAGS) --label fsync --clients 100,1000 --conns 10 \
	  --key-size 48 --val-size 1024 --key-space-size 100000 --store-args=--durability=fsync \
	  --etcd-data-dir $(BENCH_DISK_DIR) --out $(BENCH_OUT)/put-fsync; fi
	-if [ "$(BENCH_MEMORY_KEYS)" != 0 ]; then $(MEGANODE_BIN) bench memory --keys $(BENCH_MEMORY_KEYS) --updates 10 \
	  --out $(BENCH_OUT)/memory; fi
	-if [ "$(BENCH_STATE_NODES)" != 0 ]; then $(MEGANODE_BIN) bench state --nodes $(BENCH_STATE_NODES) --target both \
	  --out $(BENCH_OUT)/state; fi
	-if [ "$(BENCH_APIFAILOVER_NODES)" != 0 ]; then $(MEGANODE_BIN) bench apiserver-failover --nodes $(BENCH_APIFAILOVER_NODES) \
	  --rate 20 --warmup 10s --window 30s --downtime 5s --state-dir $(BIN)/bench-apiserver-failover-state --out $(BENCH_APIFAILOVER_OUT); fi
	$(MEGANODE_BIN) bench report --in $$(ls -d $(BENCH_OUT)/*/ | paste -sd, -) --md docs/benchmarks.md --charts docs/bench

# `meganode scheduler million` (issue 37): the whole meganode scheduler in one process over an in-process
# apiserver of MILLION_NODES KWOK-like nodes and MILLION_PODS pods created ahead, run to the last bind, for
# each workload in MILLION_WORKLOADS: wall time, CPU per role, peak RSS, pods/s chart, placement, the model's
# prediction. If the size does not fit this machine's memory the command halves it and says so. Output in
# MILLION_OUT. Not part of `make test`: 100K takes minutes, 1M most of an hour on 2 cores.
MILLION_NODES ?= 1000000
MILLION_PODS ?= $(MILLION_NODES)
MILLION_WORKLOADS ?= uniform mixed
MILLION_FLAGS ?=
MILLION_OUT ?= $(BIN)/million
.PHONY: million
million: meganode
	@mkdir -p $(MILLION_OUT)
	@set -o pipefail; for w in $(MILLION_WORKLOADS); do \
	  $(MEGANODE_BIN) scheduler million --nodes $(MILLION_NODES) --pods $(MILLION_PODS) --workload $$w \
	    --json $(MILLION_OUT)/$$w-$(MILLION_NODES).json $(MILLION_FLAGS) 2>&1 | tee $(MILLION_OUT)/$$w-$(MILLION_NODES).txt || exit 1; done

# `meganode bench scale` (issue 37, part 2): SCALE_LADDER node counts (comma-separated, ascending) through a real
# kube-apiserver, SCALE_PODS_PER_NODE pods per node, for SCALE_STACK (both: meganode, then etcd v3.6 + kube-scheduler;
# a fresh cluster each): time to all nodes Ready with their Lease, time to place all pods, pods/s, API p99 per verb
# against the EKS SLOs, CPU and RSS per component, the lease renewals held; each stack stops at its first size not
# held. report.json and summary.md in SCALE_OUT. Not part of `make test`: 100K nodes take most of an hour a stack.
SCALE_NODES ?= 5000
SCALE_LADDER ?= $(SCALE_NODES)
SCALE_PODS_PER_NODE ?= 1
SCALE_STACK ?= both
SCALE_HOLD ?= 60s
SCALE_FLAGS ?=
SCALE_OUT ?= $(BIN)/scale
.PHONY: scale
scale: build k8s-bins
	$(MEGANODE_BIN) bench scale --ladder $(SCALE_LADDER) --pods-per-node $(SCALE_PODS_PER_NODE) --stack $(SCALE_STACK) \
	  --hold $(SCALE_HOLD) --state-dir $(BIN)/scale-state --out $(SCALE_OUT) $(SCALE_FLAGS)

# Real Kubernetes components for `meganode up`: kube-apiserver, kube-controller-manager and kube-scheduler from
# k8s.io/kubernetes (tiny mains in cmd/kube-*), and KWOK built in a throw-away module so its dependencies do not
# move the versions kube-apiserver is built with. Its Stage configs are copied from the module cache into
# bin/kwok-stages/. A stamp makes the second run a no-op; `nice` leaves room for other builds.
K8S_VERSION ?= v1.36.3
KWOK_VERSION ?= v0.8.0
K8S_STAMP := $(BIN)/.k8s-bins-$(K8S_VERSION)-kwok-$(KWOK_VERSION).stamp
K8S_VERSION_PARTS = $(subst ., ,$(patsubst v%,%,$(K8S_VERSION)))
K8S_LDFLAGS = -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
  -X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=$(word 1,$(K8S_VERSION_PARTS)) \
  -X $(p).gitMinor=$(word 2,$(K8S_VERSION_PARTS)) -X $(p).gitTreeState=clean -X $(p).buildDate=2026-01-01T00:00:00Z)
K8S_MAINS := $(wildcard cmd/kube-apiserver/*.go cmd/kube-controller-manager/*.go cmd/kube-scheduler/*.go)
KWOK_STAGES := node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml

.PHONY: k8s-bins test-cluster demo-store
k8s-bins: $(K8S_STAMP) $(BIN)/kubemark

# The hollow kubelet of `up --kubelets` (issue 39): the kubelet's own code over a fake runtime,
# k8s.io/kubernetes/pkg/kubemark under a main of ours (cmd/kubemark/main.go says what it changes),
# built from the same module and version ldflags as kube-apiserver (≈1 min on a warm build cache).
$(BIN)/kubemark: $(wildcard cmd/kubemark/*.go) go.mod go.sum
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }
	@mkdir -p $(BIN)
	@echo "building kubemark $(K8S_VERSION)"
	nice -n 10 $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@ ./cmd/kubemark
	@$@ --version

$(K8S_STAMP): $(K8S_MAINS)
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }
	@mkdir -p $(BIN)
	@for c in kube-apiserver kube-controller-manager kube-scheduler; do \
	  echo "building $$c $(K8S_VERSION) (first time: minutes)"; \
	  nice -n 10 $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $(BIN)/$$c ./cmd/$$c || exit 1; done
	@echo "building kwok $(KWOK_VERSION)"; set -e; t=$$(mktemp -d); trap 'rm -rf $$t' EXIT; \
	  cd $$t && $(GO) mod init meganode-kwok-build >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod $(GO) get -tool sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION) >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod nice -n 10 $(GO) build -ldflags '-s -w' -o $(BIN)/kwok sigs.k8s.io/kwok/cmd/kwok; \
	  d=$$(GOFLAGS=-mod=mod $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok); rm -rf $(BIN)/kwok-stages; \
	  for f in $(KWOK_STAGES); do mkdir -p $(BIN)/kwok-stages/$$(dirname $$f); \
	    install -m 644 $$d/kustomize/stage/$$f $(BIN)/kwok-stages/$$f; done
	@$(BIN)/kube-apiserver --version && $(BIN)/kwok --version
	@touch $@

# Only the cluster end-to-end test (up, client-go CRUD/watch, 200 pods, store restart, down).
test-cluster: build k8s-bins
	$(GO) test -count=1 -timeout 15m -v ./test/e2e/cluster/

# `make test` builds the Kubernetes binaries first: the cluster e2e test needs them (cached after the first run);
# etcdctl, which the quota and lock/elect e2e tests run against both servers; helm, which renders the chart
# (deploy/helm, and its server-side dry run in test/e2e/scheduler); and the images, whose binaries deploy/images runs.
test-go: k8s-bins etcdctl helm images

# etcdctl at the version of the etcd the tests compare with (go.mod), built in a throw-away module as
# etcd's go.mod files carry replace directives that `go install` refuses (toolchain notes). A stamp
# makes the second run a no-op.
ETCD_VERSION ?= $(shell $(GO) list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3 2>/dev/null || echo v3.6.16)
ETCDCTL_STAMP = $(BIN)/.etcdctl-$(ETCD_VERSION).stamp
etcdctl: $(ETCDCTL_STAMP)

$(ETCDCTL_STAMP):
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }
	@mkdir -p $(BIN)
	@echo "building etcdctl $(ETCD_VERSION)"; set -e; t=$$(mktemp -d); trap 'rm -rf $$t' EXIT; \
	  cd $$t && $(GO) mod init meganode-etcdctl-build >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod $(GO) get -tool go.etcd.io/etcd/etcdctl/v3@$(ETCD_VERSION) >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod $(GO) build -o $(BIN)/etcdctl go.etcd.io/etcd/etcdctl/v3
	@$(BIN)/etcdctl version | head -1 && touch $@

# etcd's own benchmark tool (go.etcd.io/etcd/v3/tools/benchmark), built like etcdctl in a throw-away module.
ETCD_BENCHMARK_VERSION ?= v3.6.8
BENCHMARK_STAMP = $(BIN)/.benchmark-$(ETCD_BENCHMARK_VERSION).stamp
etcd-benchmark: $(BENCHMARK_STAMP)

$(BENCHMARK_STAMP):
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }
	@mkdir -p $(BIN)
	@echo "building etcd benchmark $(ETCD_BENCHMARK_VERSION)"; set -e; t=$$(mktemp -d); trap 'rm -rf $$t' EXIT; \
	  cd $$t && $(GO) mod init meganode-benchmark-build >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod $(GO) get -tool go.etcd.io/etcd/v3/tools/benchmark@$(ETCD_BENCHMARK_VERSION) >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod $(GO) build -o $(BIN)/benchmark go.etcd.io/etcd/v3/tools/benchmark
	@$(BIN)/benchmark --help >/dev/null && touch $@

# The soak (issue 18): etcd's `benchmark put` against meganode-store and real etcd side by side for SOAK_DURATION,
# node-lease-like load (10K keys, 400 B values, SOAK_RATE writes/s per server, compaction every minute by the tool's
# --compact-interval 1m); per minute RSS, data-dir size, p99, p99.9 and max. Not part of `make test`.
SOAK_DURATION ?= 1h
SOAK_RATE ?= 5000
SOAK_CLIENTS ?= 200
SOAK_OUT ?= docs/bench/soak
SOAK_DATA_DIR ?= $(BIN)/soak-data
SOAK_FLAGS ?=
.PHONY: soak etcd-benchmark
soak: build etcd-benchmark
	@mkdir -p $(SOAK_DATA_DIR)
	$(MEGANODE_BIN) bench soak --duration $(SOAK_DURATION) --rate $(SOAK_RATE) --clients $(SOAK_CLIENTS) \
	  --benchmark-bin $(BIN)/benchmark --data-dir $(SOAK_DATA_DIR) --out $(SOAK_OUT) $(SOAK_FLAGS)

# The heartbeat ceiling (issue 37): node Lease renewals through kube-apiserver on meganode-store, then on etcd 3.6
# (one after the other, data on tmpfs), the rate stepped until the lease PUT p99 passes 1 s; the ratio, CPU per
# renewal of every process, and the ceiling in nodes at the kubelet's 10 s renewal. About 13 minutes on 2 cores.
# Not part of `make test` or `make bench`; docs/bench/heartbeat/run.sh is the committed run.
HEARTBEAT_LEASES ?= 10000
HEARTBEAT_RATES ?= 400,500,600,700,800,900,1000,1100,1200,1300,1400,1500,1700
HEARTBEAT_STEP ?= 60s
HEARTBEAT_OUT ?= $(BIN)/bench-heartbeat
.PHONY: bench-heartbeat
bench-heartbeat: build k8s-bins
	$(MEGANODE_BIN) bench heartbeat --store both --leases $(HEARTBEAT_LEASES) --rates $(HEARTBEAT_RATES) \
	  --step $(HEARTBEAT_STEP) --out $(HEARTBEAT_OUT)

# Container images (bin/images/): meganode-store and meganode (the scheduler roles), without a Docker daemon and
# without pulling a base image: tools/ociimage (go-containerregistry, a module of its own; why not crane: its
# main.go) writes one reproducible layer onto scratch as an OCI layout (bin/images/NAME/) and a docker-save
# tarball (bin/images/NAME.tar, for docker/podman load). meganode is built static (CGO_ENABLED=0). The store
# is dynamically linked against glibc and no musl target is installed here, so its layer carries the loader
# and exactly the libraries `ldd` names, at their paths (as gcr.io/distroless/cc does), debug info stripped.
# Tags: VERSION (store/Cargo.toml's, the chart's appVersion) and VERSION-<git describe --always --dirty>.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' store/Cargo.toml | head -1)
GIT_DESCRIBE := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
IMAGE_TAG ?= $(VERSION)-$(GIT_DESCRIBE)
IMAGE_REGISTRY ?= ghcr.io/meganode
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGES := $(BIN)/images
OCIIMAGE := $(BIN)/ociimage
IMAGE_LABELS = --label org.opencontainers.image.version=$(IMAGE_TAG) \
  --label org.opencontainers.image.revision=$(shell git rev-parse HEAD 2>/dev/null) \
  --label org.opencontainers.image.source=https://github.com/meganode/meganode --label org.opencontainers.image.licenses=Apache-2.0
.PHONY: images image-tag
image-tag:
	@echo $(IMAGE_TAG)

$(OCIIMAGE): tools/ociimage/main.go tools/ociimage/go.mod tools/ociimage/go.sum
	@mkdir -p $(BIN)
	cd tools/ociimage && $(GO) build -o $(OCIIMAGE) .

images: store $(OCIIMAGE)
	@rm -rf $(IMAGES)/rootfs && mkdir -p $(IMAGES)/rootfs
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w -X main.version=$(IMAGE_TAG)' -o $(IMAGES)/rootfs/meganode ./cmd/meganode
	objcopy --strip-debug $(STORE_BIN) $(IMAGES)/rootfs/meganode-store
	@! readelf -l $(IMAGES)/rootfs/meganode | grep -q INTERP || { echo "meganode is not static"; exit 1; }
	$(OCIIMAGE) --layout $(IMAGES)/meganode --tar $(IMAGES)/meganode.tar --epoch $(SOURCE_DATE_EPOCH) \
	  --tag $(IMAGE_REGISTRY)/meganode:$(VERSION),$(IMAGE_REGISTRY)/meganode:$(IMAGE_TAG) $(IMAGE_LABELS) \
	  --label org.opencontainers.image.title=meganode --entrypoint /usr/local/bin/meganode --env PATH=/usr/local/bin \
	  --file $(IMAGES)/rootfs/meganode=/usr/local/bin/meganode=0755
	$(OCIIMAGE) --layout $(IMAGES)/meganode-store --tar $(IMAGES)/meganode-store.tar --epoch $(SOURCE_DATE_EPOCH) \
	  --tag $(IMAGE_REGISTRY)/meganode-store:$(VERSION),$(IMAGE_REGISTRY)/meganode-store:$(IMAGE_TAG) $(IMAGE_LABELS) \
	  --label org.opencontainers.image.title=meganode-store --entrypoint /usr/local/bin/meganode-store --env PATH=/usr/local/bin \
	  --file $(IMAGES)/rootfs/meganode-store=/usr/local/bin/meganode-store=0755 \
	  $$(ldd $(STORE_BIN) | awk '$$2 == "=>" && $$3 ~ /^\// {print "--file " $$3 "=" $$3} $$1 ~ /^\// {print "--file " $$1 "=" $$1}')
	@rm -rf $(IMAGES)/rootfs
	@ls -l $(IMAGES)/*.tar

# Helm (its CLI, helm.sh/helm/v4) for rendering deploy/helm/meganode: built like etcdctl in a throw-away
# module, as its Kubernetes libraries would move the versions our go.mod builds kube-apiserver with.
# A stamp makes the second run a no-op.
HELM_VERSION ?= v4.3.1
HELM_STAMP = $(BIN)/.helm-$(HELM_VERSION).stamp
.PHONY: helm
helm: $(HELM_STAMP)

$(HELM_STAMP):
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }
	@mkdir -p $(BIN)
	@echo "building helm $(HELM_VERSION) (first time: minutes)"; set -e; t=$$(mktemp -d); trap 'rm -rf $$t' EXIT; \
	  cd $$t && $(GO) mod init meganode-helm-build >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod $(GO) get -tool helm.sh/helm/v4/cmd/helm@$(HELM_VERSION) >/dev/null 2>&1 && \
	  GOFLAGS=-mod=mod nice -n 10 $(GO) build -ldflags '-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)' \
	    -o $(BIN)/helm helm.sh/helm/v4/cmd/helm
	@$(BIN)/helm version --short && touch $@

clean:
	rm -rf $(BIN) store/target
