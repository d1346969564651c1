# meganode — build, test and demo. Every target installs what it needs on a fresh Debian machine.
SHELL := /bin/bash
GO ?= go
CARGO ?= cargo
BIN := $(CURDIR)/bin
STORE_BIN := $(BIN)/meganode-store
MEGANODE_BIN := $(BIN)/meganode
export MEGANODE_STORE_BIN := $(STORE_BIN)
# The differential test's operation count; `make test-long` raises it.
DIFF_OPS ?= 24000

.PHONY: all deps store meganode build test test-store test-go test-long demo bench clean

all: build

# protoc is needed by the etcd-client crate's build script (it generates the gRPC stubs).
deps:
	@command -v protoc >/dev/null || { echo "installing protobuf-compiler"; \
	  (apt-get update -qq && apt-get install -y -qq protobuf-compiler) >/dev/null; }
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup)"; exit 1; }
	@command -v $(GO) >/dev/null || { echo "go not found: install Go >= 1.26"; exit 1; }

store: deps
	cd store && $(CARGO) build --release --locked --quiet
	@mkdir -p $(BIN) && cp store/target/release/meganode-store $(STORE_BIN)

meganode: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(MEGANODE_BIN) ./cmd/meganode

build: store meganode

test: build test-store test-go

test-store: deps
	cd store && $(CARGO) test --release --locked

test-go: build
	$(GO) vet ./...
	MEGANODE_DIFF_OPS=$(DIFF_OPS) $(GO) test -count=1 -timeout 40m ./...

test-long: build
	MEGANODE_DIFF_OPS=200000 $(GO) test -count=1 -timeout 120m ./test/e2e/...

demo: build
	$(MEGANODE_BIN) demo --store-bin $(STORE_BIN)

clean:
	rm -rf $(BIN) store/target
