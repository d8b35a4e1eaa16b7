# cri-dockerd. `make run` serves on this node; `make test` sets up a fresh Debian machine
# (Docker engine, test runtimes, test images, critest) and runs every test.
SHELL := /bin/bash
GO ?= go
BIN := bin/cri-dockerd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/cri-dockerd/cri-dockerd/core.Version=$(VERSION) -X github.com/cri-dockerd/cri-dockerd/core.GitCommit=$(COMMIT)
# Extra flags for `make run`, e.g. ARGS='--runtime-handler spin=io.containerd.spin.v2'
ARGS ?=

.PHONY: build run test unit lint setup integration critest bench clean

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cri-dockerd

# Serve on the default socket (unix:///var/run/cri-dockerd.sock). Installs and starts Docker
# first when this machine has none running (no test runtimes are added to daemon.json).
run: build
	@/usr/bin/docker version >/dev/null 2>&1 || TEST_RUNTIMES=0 integration/setup/docker.sh
	./$(BIN) $(ARGS)

test: lint unit setup integration critest

lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./integration/...

unit:
	$(GO) test -count=1 ./...

# Docker engine with the test runtimes, and the local test images.
setup:
	integration/setup/docker.sh
	integration/setup/images.sh

integration: setup
	$(GO) test -tags integration -count=1 -timeout 20m ./integration/...

critest: build setup
	integration/critest/run.sh $(BIN)

bench: build setup
	$(GO) test -tags integration -run XXX -bench . -benchtime 20x ./integration/...

clean:
	rm -rf bin
