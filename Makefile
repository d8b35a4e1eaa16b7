# cri-dockerd. `make run` serves on this node; `make test` sets up a fresh Debian machine
# (Docker engine, test runtimes, test images, critest) and runs every test.
SHELL := /bin/bash
GO ?= go
BIN := bin/cri-dockerd
# One version for the binary (--version) and the packages: X.Y.Z at a tag vX.Y.Z, else the base
# in VERSION as 0.5.0~dev.N.gHASH (packaging/version.sh). Computed once per make run.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell packaging/version.sh)
endif
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/cri-dockerd/cri-dockerd/internal/version.Version=$(VERSION) -X github.com/cri-dockerd/cri-dockerd/internal/version.GitCommit=$(COMMIT)
# Extra flags for `make run`, e.g. ARGS='--runtime-handler spin=io.containerd.spin.v2'
ARGS ?=

PREFIX ?= /usr/local
DESTDIR ?=
SYSTEMD_DIR ?= /etc/systemd/system

.PHONY: build run install test unit lint setup integration critest bench clean fuzz

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cri-dockerd

# Serve on the default socket (unix:///var/run/cri-dockerd.sock). Installs and starts Docker
# (and Debian's CNI plugins) first when this machine has none running (no test runtimes are
# added to daemon.json), and the sample CNI bridge network when no CNI config exists.
run: build
	@/usr/bin/docker version >/dev/null 2>&1 || TEST_RUNTIMES=0 hack/docker.sh
	@ls /etc/cni/net.d/*.conf* >/dev/null 2>&1 || { echo "installing the sample CNI bridge network (packaging/cni)"; \
		install -D -m 0644 packaging/cni/10-cri-dockerd-bridge.conflist /etc/cni/net.d/10-cri-dockerd-bridge.conflist; }
	./$(BIN) $(ARGS)

# The binary and upstream's unit names (cri-docker.service, cri-docker.socket); then
# systemctl daemon-reload && systemctl enable --now cri-docker.socket cri-docker.service
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/cri-dockerd
	install -D -m 0644 packaging/systemd/cri-docker.socket $(DESTDIR)$(SYSTEMD_DIR)/cri-docker.socket
	sed 's|/usr/local/bin/cri-dockerd|$(PREFIX)/bin/cri-dockerd|' packaging/systemd/cri-docker.service > cri-docker.service.tmp
	install -D -m 0644 cri-docker.service.tmp $(DESTDIR)$(SYSTEMD_DIR)/cri-docker.service
	rm -f cri-docker.service.tmp

test: prebuild lint unit setup integration critest critest-gvisor setup-docker29 integration-docker29 critest-docker29 e2e-kubelet e2e-node-fast release-test fuzz

# The long cached builds of later steps (Docker 29, Kubernetes, the node e2e suite), started in
# the background at once (hack/prebuild.sh); those steps wait for them.
.PHONY: prebuild
prebuild:
	hack/prebuild.sh

lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./integration/...

unit:
	$(GO) test -count=1 ./...

# Every go test -fuzz target for FUZZTIME, one after the other (a fuzz run takes every core).
# A failure leaves its input under the package's testdata/fuzz/; keep it as a seed once fixed.
# Minimizing a new input is bounded (it held FuzzCRILogWriter's one worker for 18 s of 30).
FUZZTIME ?= 30s
FUZZ_TARGETS := internal/core:FuzzValidateConfig internal/core:FuzzContainerLogPath internal/core:FuzzLabels internal/core:FuzzParseName \
	internal/core:FuzzDecodeCheckpoint internal/network/podcidr:FuzzParsePodCIDRs internal/containerlog:FuzzDecodeRecord internal/containerlog:FuzzCRILogWriter
# test/fuzz/run.sh runs one target and tells Go 1.26's own end-of-fuzztime race
# (golang/go#75804: "context deadline exceeded", no failing input) from a failure.
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		test/fuzz/run.sh $(GO) $${t%%:*} $${t#*:} $(FUZZTIME); \
	done

# Docker engine with the test runtimes, and the local test images.
setup:
	hack/docker.sh
	hack/images.sh

integration: setup
	$(GO) test -tags integration -count=1 -timeout 20m ./integration/...

critest: build setup
	test/critest/run.sh $(BIN)

# The last lines compare with upstream cri-dockerd v0.4.3, built once from the module proxy
# (hack/upstream.sh), on one private dockerd: 200 concurrent RunPodSandbox, and a
# node of 100 and 250 pods (lists, a status sweep, RSS, restart, 100 pods started 16 at a time),
# StopPodSandbox alone (Docker's bridge, CNI, and with the pod's container still running);
# then bench-density, pods started through the real kubelet.
bench: build setup
	$(GO) test -tags integration -run XXX -bench . -skip 'Stats|ContainerEventLatency|ConcurrentRunPodSandbox|NodeFullOfPods|StopPodSandbox' -benchtime 20x -timeout 30m ./integration/...
	$(GO) test -tags integration -run XXX -bench 'Stats|ContainerEventLatency' -benchtime 3x -timeout 30m ./integration/
	CRI_DOCKERD_UPSTREAM=$$(hack/upstream.sh) $(GO) test -tags integration -run XXX \
		-bench 'ConcurrentRunPodSandbox|NodeFullOfPods' -benchtime 1x -timeout 60m ./integration/
	CRI_DOCKERD_UPSTREAM=$$(hack/upstream.sh) $(GO) test -tags integration -run XXX \
		-bench 'StopPodSandbox' -benchtime 20x -timeout 30m ./integration/
	$(MAKE) bench-density

# Pod startup density through the real kubelet, ours and upstream in one run
# (test/e2e/density-bench.sh; DENSITY_COUNTS=10,100 by default).
.PHONY: bench-density
bench-density: build setup
	test/e2e/density-bench.sh $(BIN) $$(hack/upstream.sh)

clean:
	rm -rf bin

# The second engine: Docker 29.8.0 with the containerd image store (containerd 2.3.5, runc 1.5.1),
# built once from the Go module proxy into /var/cache/cri-dockerd-ci/docker29 and run beside the
# 20.10 engine on its own socket (hack/docker29.sh). It is left running for the next
# run to reuse, as the 20.10 dockerd is; `make stop-docker29` stops it. DOCKER29_STORE=overlay2
# runs it with the classic overlay2 store instead.
DOCKER29_HOST := unix:///run/cri-dockerd-docker29/docker.sock
# Integration tests that fail on Docker 29 for known reasons (integration/skip-docker29.txt);
# DOCKER29_SKIP= runs them all.
DOCKER29_SKIP ?= $(shell sed -e 's/\#.*//' integration/skip-docker29.txt | awk 'NF {print $$1}' | paste -sd'|')
.PHONY: setup-docker29 integration-docker29 critest-docker29 stop-docker29

setup-docker29: setup
	hack/docker29.sh

integration-docker29: setup-docker29
	DOCKER_HOST=$(DOCKER29_HOST) $(GO) test -tags integration -count=1 -timeout 20m \
		$(if $(DOCKER29_SKIP),-skip '^($(DOCKER29_SKIP))$$') ./integration/...

critest-docker29: build setup-docker29
	CRITEST_DOCKER_ENDPOINT=$(DOCKER29_HOST) CRITEST_EXPECTED=$(CURDIR)/test/critest/expected-failures-docker29.txt \
		test/critest/run.sh $(BIN)

stop-docker29:
	hack/docker29.sh stop

# A real kubelet v1.37.2 (+ etcd, kube-apiserver) end to end on a private dockerd; builds the
# Kubernetes binaries into /var/cache/cri-dockerd-ci/k8s-bin/ once (test/e2e/README.md).
.PHONY: e2e-kubelet
e2e-kubelet: build setup
	test/e2e/run.sh $(BIN)

# Release artifacts in dist/ (docs/packages.md): for each arch upstream's
# cri-dockerd-VERSION.ARCH.tgz, a .deb and an .rpm (nfpm, its own module in packaging/release),
# and SHA256SUMS. Static binaries (CGO_ENABLED=0), cross-compiled, with the same LDFLAGS.
RELEASE_ARCHES ?= amd64 arm64
.PHONY: release release-test
release:
	rm -rf dist bin/release
	@for arch in $(RELEASE_ARCHES); do echo "building linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o bin/release/linux-$$arch/cri-dockerd ./cmd/cri-dockerd || exit 1; done
	$(GO) -C packaging/release run . -version '$(VERSION)' -root '$(CURDIR)' -bin '$(CURDIR)/bin/release' \
		-dist '$(CURDIR)/dist' -arch '$(RELEASE_ARCHES)' -mtime "$$(git log -1 --format=%ct 2>/dev/null || echo 0)"

# Builds the release and checks it: unit files verified, the amd64 .deb installed into a fresh
# Debian 12 root (debootstrap, cached in /var/cache/cri-dockerd-ci), ELF arches, tgz layout, sums.
release-test: release
	@bad=$$(gofmt -l packaging/release); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) -C packaging/release vet ./...
	test/packaging/check.sh

# Mutation testing (not in `make test`): gremlins v0.6.0, built once into
# /var/cache/cri-dockerd-ci/bin/, makes one wrong change at a time to a package's code and runs
# that package's unit tests, which must fail. MUTATION_WORKERS (1) mutants at a time; a mutant
# whose tests run longer than MUTATION_TIMEOUT_COEF times the package's own test run is timed
# out. Prints, per package, killed / lived / not covered / timed out and the survivors
# (lived / (killed + lived)); the full reports are in bin/mutation-PKG.log. MUTATION_PKGS picks packages, MUTATION_EXCLUDE adds
# gremlins -E file regexps (e.g. MUTATION_EXCLUDE='^fake.*\.go$$').
GREMLINS_VERSION := v0.6.0
GREMLINS_DIR := /var/cache/cri-dockerd-ci/bin/gremlins-$(GREMLINS_VERSION)
MUTATION_PKGS ?= internal/config internal/containerlog internal/network internal/libdocker internal/core
MUTATION_TIMEOUT_COEF ?= 10
MUTATION_WORKERS ?= 1
MUTATION_EXCLUDE ?=
.PHONY: mutation
mutation:
	@test -x $(GREMLINS_DIR)/gremlins || { mkdir -p $(GREMLINS_DIR) && cd /tmp && \
		GOBIN=$(GREMLINS_DIR) GOFLAGS= $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION); }
	@mkdir -p bin; set -e; total=$$(date +%s); for p in $(MUTATION_PKGS); do \
		start=$$(date +%s); \
		(cd $$p && GOFLAGS=-count=1 $(GREMLINS_DIR)/gremlins unleash --workers $(MUTATION_WORKERS) \
			--timeout-coefficient $(MUTATION_TIMEOUT_COEF) $(foreach e,$(MUTATION_EXCLUDE),-E '$(e)') \
			-o $(CURDIR)/bin/mutation-$${p##*/}.json) > bin/mutation-$${p##*/}.log 2>&1 || { tail -20 bin/mutation-$${p##*/}.log; exit 1; }; \
		k=$$(grep -c '^ *KILLED ' bin/mutation-$${p##*/}.log || true); l=$$(grep -c '^ *LIVED ' bin/mutation-$${p##*/}.log || true); \
		n=$$(grep -c '^ *NOT COVERED ' bin/mutation-$${p##*/}.log || true); t=$$(grep -c '^ *TIMED OUT ' bin/mutation-$${p##*/}.log || true); \
		echo "mutation ./$$p/: killed $$k, lived $$l, not covered $$n, timed out $$t;" \
			"survivors $$(awk -v k=$$k -v l=$$l 'BEGIN { printf "%.1f", k + l ? 100 * l / (k + l) : 0 }') % ($$(( $$(date +%s) - start )) s)"; \
		grep '^ *LIVED ' bin/mutation-$${p##*/}.log | sed 's/^ */    /' || true; \
	done; echo "mutation: $$(( $$(date +%s) - total )) s"

# critest with every pod on gVisor (-runtime-handler gvisor: Debian's runsc with
# --network=host, from hack/docker.sh) on the 20.10 engine, CNI networking as in
# `make critest`; what gVisor itself does not support is in expected-failures-gvisor.txt.
.PHONY: critest-gvisor
critest-gvisor: build setup
	CRITEST_RUNTIME_HANDLER=gvisor CRITEST_EXPECTED=$(CURDIR)/test/critest/expected-failures-gvisor.txt \
		test/critest/run.sh $(BIN)

# The same on Docker 29 (not in `make test`, for time): expected-failures-gvisor-docker29.txt.
.PHONY: critest-gvisor-docker29
critest-gvisor-docker29: build setup-docker29
	CRITEST_RUNTIME_HANDLER=gvisor CRITEST_DOCKER_ENDPOINT=$(DOCKER29_HOST) \
		CRITEST_EXPECTED=$(CURDIR)/test/critest/expected-failures-gvisor-docker29.txt \
		test/critest/run.sh $(BIN)

# Kubernetes' node e2e suite (test/e2e_node v1.37.2) against our binary, with the suite's own
# kubelet on a private dockerd and offline stand-ins of its images (test/e2e-node/README.md);
# builds the suite, ginkgo and the images' programs into /var/cache/cri-dockerd-ci/e2e-node/ once.
# e2e-node: [NodeConformance] + RuntimeClass (parallel) and the serial image pull specs;
# e2e-node-fast (in `make test`): the subset of run.sh's FAST_FOCUS.
.PHONY: e2e-node e2e-node-fast
e2e-node: build setup
	test/e2e-node/run.sh $(BIN)

e2e-node-fast: build setup
	test/e2e-node/run.sh --fast $(BIN)
