# cri-dockerd. `make run` serves on this node; `make test` sets up a fresh Debian machine
# (Docker engines, test runtimes, test images, critest, a kubelet) and runs the gate, the tests
# every change must pass (what CI runs); `make test-all` runs the gate and then every tier, the
# long suites (docs/testing.md). `make help` lists the targets. Scripts: hack/ (machine set-up,
# helpers), test/ (the suites; test/lib what they share, test/versions.sh what they build).
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

.PHONY: help build run install clean \
	test test-all tiers prebuild lint shellcheck unit fuzz setup integration \
	critest critest-gvisor critest-gvisor-docker29 setup-docker29 integration-docker29 integration-long critest-docker29 stop-docker29 \
	e2e-kubelet e2e-node e2e-node-fast e2e-cluster e2e-cluster-smoke conformance vm vm-tools vm-systemd vm-node vm-critest vm-critest-groups vm-checks vm-full \
	bench bench-density mutation \
	release release-test monitoring-test

##@ Build, run, install

build: ## build bin/cri-dockerd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cri-dockerd

# Serve on the default socket (unix:///var/run/cri-dockerd.sock). Installs and starts Docker
# (and Debian's CNI plugins) first when this machine has none running (no test runtimes are
# added to daemon.json), and the sample CNI bridge network when no CNI config exists.
run: build ## serve on unix:///var/run/cri-dockerd.sock (installs Docker and the sample CNI network if missing; ARGS= adds flags)
	@/usr/bin/docker version >/dev/null 2>&1 || TEST_RUNTIMES=0 hack/docker.sh
	@ls /etc/cni/net.d/*.conf* >/dev/null 2>&1 || { echo "installing the sample CNI bridge network (packaging/cni)"; \
		install -D -m 0644 packaging/cni/10-cri-dockerd-bridge.conflist /etc/cni/net.d/10-cri-dockerd-bridge.conflist; }
	./$(BIN) $(ARGS)

# The binary and upstream's unit names (cri-docker.service, cri-docker.socket); then
# systemctl daemon-reload && systemctl enable --now cri-docker.socket cri-docker.service
install: build ## install the binary and the systemd units (PREFIX, DESTDIR, SYSTEMD_DIR)
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/cri-dockerd
	install -D -m 0644 packaging/systemd/cri-docker.socket $(DESTDIR)$(SYSTEMD_DIR)/cri-docker.socket
	sed 's|/usr/local/bin/cri-dockerd|$(PREFIX)/bin/cri-dockerd|' packaging/systemd/cri-docker.service > cri-docker.service.tmp
	install -D -m 0644 cri-docker.service.tmp $(DESTDIR)$(SYSTEMD_DIR)/cri-docker.service
	rm -f cri-docker.service.tmp

clean: ## remove bin/
	rm -rf bin

##@ Tests

# The gate: every step a make target of its own, run in this order by test/steps.sh under a
# timeout (minutes after the colon, counted in load-scaled time: a busy machine's second counts
# less), which prints each step's time and the machine's load. At most 20 minutes warm and 45
# cold on a 2-core machine.
# (The gate's own load is 4-8 on 2 cores, a factor of 2-4: integration's 15 minutes end a hang
# after about 45 minutes of wall time, within CI's 90.)
GATE := prebuild:10 lint:10 unit:10 setup:20 integration:15 critest:15 \
	setup-docker29:30 integration-docker29:15 critest-docker29:15 e2e-kubelet:30
# The tiers: the long suites, independent of each other; `make tiers` runs them all, and every
# failure is reported at the end. Each one alone is its make target.
TIERS := integration-long:30 critest-gvisor:15 critest-gvisor-docker29:15 release-test:20 monitoring-test:10 \
	fuzz:15 e2e-cluster-smoke:40 e2e-node:90 vm-checks:60 conformance:120 bench:180

# TIMEOUT_SCALE multiplies every step's timeout and the Go integration tests' own, for a machine
# known to be slower than this 2-core one. go test's own -timeout is only a last bound for a run
# outside test/steps.sh, whose load-scaled timeout comes first on a busy machine (and sends
# SIGQUIT: every goroutine's stack, as go test's timeout prints).
TIMEOUT_SCALE ?= 1
export TIMEOUT_SCALE
INTEGRATION_TIMEOUT := $(shell awk 'BEGIN { print int(90 * $(TIMEOUT_SCALE) + 0.5) "m" }')

test: ## the gate (what CI runs): lint, unit, integration and critest on Docker 20.10 and 29, the kubelet e2e
	@MAKE='$(MAKE)' test/steps.sh gate $(GATE)

tiers: ## every tier (docs/testing.md), going on past a failed one
	@MAKE='$(MAKE)' test/steps.sh --keep-going tiers $(TIERS)

test-all: ## the gate, then every tier (hours)
	@MAKE='$(MAKE)' test/steps.sh gate $(GATE) && MAKE='$(MAKE)' test/steps.sh --keep-going tiers $(TIERS)

# The long cached builds the gate needs later (critest, Docker 29, the kubelet and its API server),
# started in the background at once (hack/prebuild.sh); the steps that need them wait for them.
prebuild: ## start the gate's long cached builds (critest, Docker 29, the kubelet) in the background
	hack/prebuild.sh

lint: shellcheck ## gofmt, go vet (also with the integration tag), the import rules, shellcheck and the test library's checks
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./integration/...
	$(GO) test -count=1 -run TestImportRules ./internal/
	test/versions.sh --check
	python3 -B -m unittest discover -s test/lib
	@for t in $$(sed -e 's/#.*//' integration/long-tests.txt integration/skip-docker29.txt); do \
		grep -q "^func $$t(" integration/*_test.go || { echo "integration/long-tests.txt or skip-docker29.txt: no test $$t"; exit 1; }; done

# Every tracked shell script (Debian's shellcheck, installed when missing).
shellcheck: ## shellcheck of every tracked shell script
	@command -v shellcheck >/dev/null || { apt-get install -y -q shellcheck >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck >/dev/null; }; }
	shellcheck -x $$(git ls-files '*.sh' .ci/run)

unit: ## unit tests (go test ./...)
	$(GO) test -count=1 ./...

# Every go test -fuzz target for FUZZTIME, one after the other (a fuzz run takes every core).
# A failure leaves its input under the package's testdata/fuzz/; keep it as a seed once fixed.
# Minimizing a new input is bounded (5 s) so that it cannot hold a target's worker for most of its time.
FUZZTIME ?= 30s
FUZZ_TARGETS := internal/core:FuzzValidateConfig internal/core:FuzzContainerLogPath internal/core:FuzzLabels internal/core:FuzzParseName \
	internal/core:FuzzDecodeCheckpoint internal/network/podcidr:FuzzParsePodCIDRs internal/containerlog:FuzzDecodeRecord internal/containerlog:FuzzCRILogWriter
# test/fuzz/run.sh runs one target and tells Go 1.26's own end-of-fuzztime race
# (golang/go#75804: "context deadline exceeded", no failing input) from a failure.
fuzz: ## every go test -fuzz target for FUZZTIME each (30s)
	@set -e; for t in $(FUZZ_TARGETS); do \
		test/fuzz/run.sh $(GO) $${t%%:*} $${t#*:} $(FUZZTIME); \
	done

# Docker engine with the test runtimes, and the local test images.
setup: ## install and start Docker 20.10 with the test runtimes; build the test images (idempotent)
	hack/docker.sh
	hack/images.sh

# go test -json through test/lib/gotest-summary.py: each package's result, the whole output of
# a failed test, and the slowest tests (where the step's time goes). The long tests of
# integration/long-tests.txt are the tier integration-long's.
names_re = ^($(subst $(space),|,$(strip $(1))))$$
empty :=
space := $(empty) $(empty)
LONG_TESTS := $(shell sed -e 's/\#.*//' integration/long-tests.txt | awk 'NF {print $$1}')
GO_INTEGRATION = $(GO) test -tags integration -count=1 -timeout $(INTEGRATION_TIMEOUT) -json

integration: setup ## Go integration tests against the real dockerd (the long ones are integration-long's)
	set -o pipefail; $(GO_INTEGRATION) -skip '$(call names_re,$(LONG_TESTS))' ./integration/... | test/lib/gotest-summary.py

# The second engine: Docker 29.8.0 with the containerd image store (containerd 2.3.5, runc 1.5.1),
# built once from the Go module proxy into /var/cache/cri-dockerd-ci/docker29 and run beside the
# 20.10 engine on its own socket (hack/docker29.sh). It is left running for the next
# run to reuse, as the 20.10 dockerd is; `make stop-docker29` stops it. DOCKER29_STORE=overlay2
# runs it with the classic overlay2 store instead.
DOCKER29_HOST := unix:///run/cri-dockerd-docker29/docker.sock
# Integration tests that fail on Docker 29 for known reasons (integration/skip-docker29.txt);
# DOCKER29_SKIP= runs them all.
DOCKER29_SKIP ?= $(shell sed -e 's/\#.*//' integration/skip-docker29.txt | awk 'NF {print $$1}')

setup-docker29: setup ## build (once) and start Docker 29 beside 20.10
	hack/docker29.sh

integration-docker29: setup-docker29 ## the Go integration tests on Docker 29 (skips integration/skip-docker29.txt and the long ones)
	set -o pipefail; DOCKER_HOST=$(DOCKER29_HOST) $(GO_INTEGRATION) -skip '$(call names_re,$(LONG_TESTS) $(DOCKER29_SKIP))' \
		./integration/... | test/lib/gotest-summary.py

# A tier: the long integration tests (integration/long-tests.txt) on both engines.
integration-long: setup-docker29 ## the long integration tests on Docker 20.10 and 29
	set -o pipefail; $(GO_INTEGRATION) -run '$(call names_re,$(LONG_TESTS))' ./integration/... | test/lib/gotest-summary.py
	set -o pipefail; DOCKER_HOST=$(DOCKER29_HOST) $(GO_INTEGRATION) -run '$(call names_re,$(LONG_TESTS))' \
		$(if $(strip $(DOCKER29_SKIP)),-skip '$(call names_re,$(DOCKER29_SKIP))') ./integration/... | test/lib/gotest-summary.py

stop-docker29: ## stop Docker 29 (its data is kept)
	hack/docker29.sh stop

##@ Suites

critest: build setup ## the CRI validation suite (critest) on Docker 20.10
	test/critest/run.sh $(BIN)

# critest with every pod on gVisor (-runtime-handler gvisor: Debian's runsc with
# --network=host, from hack/docker.sh) on the 20.10 engine, CNI networking as in
# `make critest`; what gVisor itself does not support is in expected-failures-gvisor.txt.
critest-gvisor: build setup ## critest with every pod on gVisor (runsc)
	CRITEST_RUNTIME_HANDLER=gvisor CRITEST_EXPECTED=$(CURDIR)/test/critest/expected-failures-gvisor.txt \
		test/critest/run.sh $(BIN)

critest-docker29: build setup-docker29 ## critest on Docker 29
	CRITEST_DOCKER_ENDPOINT=$(DOCKER29_HOST) CRITEST_EXPECTED=$(CURDIR)/test/critest/expected-failures-docker29.txt \
		test/critest/run.sh $(BIN)

# The same on Docker 29: expected-failures-gvisor-docker29.txt.
critest-gvisor-docker29: build setup-docker29 ## critest on gVisor on Docker 29
	CRITEST_RUNTIME_HANDLER=gvisor CRITEST_DOCKER_ENDPOINT=$(DOCKER29_HOST) \
		CRITEST_EXPECTED=$(CURDIR)/test/critest/expected-failures-gvisor-docker29.txt \
		test/critest/run.sh $(BIN)

# A real kubelet v1.37.2 (+ etcd, kube-apiserver) end to end on a private dockerd; builds the
# Kubernetes binaries into /var/cache/cri-dockerd-ci/k8s-bin/ once (test/e2e/README.md).
e2e-kubelet: build setup ## end to end with a real kubelet, kube-apiserver and etcd
	test/e2e/run.sh $(BIN)

# Kubernetes' node e2e suite (test/e2e_node v1.37.2) against our binary, with the suite's own
# kubelet on a private dockerd and offline stand-ins of its images (test/e2e-node/README.md);
# builds the suite, ginkgo and the images' programs into /var/cache/cri-dockerd-ci/e2e-node/ once.
# e2e-node: [NodeConformance] + RuntimeClass (parallel) and the serial image pull specs;
# e2e-node-fast: the subset of run.sh's FAST_FOCUS (about 6 minutes warm).
e2e-node: build setup ## Kubernetes' node e2e suite, the whole [NodeConformance] selection
	test/e2e-node/run.sh $(BIN)

e2e-node-fast: build setup ## the node e2e suite's fast subset
	test/e2e-node/run.sh --fast $(BIN)

# A kubeadm cluster of nodes as containers (systemd, their own dockerd and containerd, our .deb
# from `make release` installed with apt), flannel, kube-proxy and CoreDNS, on a private dockerd
# (test/cluster/README.md); builds its binaries and images into /var/cache/cri-dockerd-ci once.
CLUSTER_DEB = $(firstword $(wildcard dist/cri-dockerd_*_amd64.deb))
e2e-cluster: release setup ## kubeadm init + two joins, flannel, Services, DNS, kubectl streams, drain
	test/cluster/run.sh $(CLUSTER_DEB)

e2e-cluster-smoke: release setup ## its smoke test: init, one join, a cross-node pod, Services and DNS
	test/cluster/run.sh --smoke $(CLUSTER_DEB)

# Kubernetes Conformance on that cluster (test/cluster/conformance.sh): e2e.test v1.37.2's
# [Conformance] specs, in parallel then the [Serial] ones, with the stand-in images of
# test/e2e-node (make e2e-node-fast fills their registry once); then the pod startup SLO.
conformance: release setup ## Kubernetes Conformance (parallel, then Serial) and the pod startup SLO on the kubeadm cluster
	test/cluster/conformance.sh $(CLUSTER_DEB)

# The VM test bed (test/vm/README.md): a Debian 12 guest with systemd as PID 1, cgroup v2 and
# Docker's systemd cgroup driver, under qemu (software emulation here: this machine's KVM does
# not boot Debian's kernel). Builds the guest image (and, for vm-systemd, the older .deb it
# upgrades from: test/vm/old-deb.sh) into /var/cache/cri-dockerd-ci/vm/ once.
VM_PACKAGES := qemu-system-x86 qemu-utils debootstrap e2fsprogs
vm-tools:
	@command -v qemu-system-x86_64 >/dev/null && command -v qemu-img >/dev/null && command -v debootstrap >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(VM_PACKAGES); }

vm: vm-tools ## boot the cgroup v2 + systemd guest and run its smoke test
	test/vm/smoke.sh --timeout 900

vm-systemd: release setup vm-tools ## our .deb under systemd in the VM: upgrade from an older .deb with a pod running, socket activation, Docker late, purge
	test/vm/systemd.sh --timeout 900

# One boot, both of Docker's cgroup drivers (switched in the guest), bin/cri-dockerd with
# packaging's units, and the kubelet of test/e2e/build-k8s.sh (built once into its cache).
vm-node: build setup vm-tools ## a cgroup v2 node in the VM, systemd and cgroupfs drivers: cgroup_parent, unified, OOM, stats, AppArmor, a standalone kubelet
	test/vm/node.sh --timeout 900

# The VM tier (test/vm/all.sh: systemd, node, critest groups), about 16 minutes warm; alone on
# the machine (qemu's software emulation takes a core for minutes at a time).
vm-checks: build release setup vm-tools ## the VM tier: vm-systemd, vm-node, vm-critest-groups (test/vm/all.sh)
	test/vm/all.sh

vm-full: build release setup vm-tools ## more than vm-checks: the kubelet under both drivers, the whole vm-critest
	test/vm/all.sh --full

# critest in the VM (test/vm/critest.sh), with test/vm/critest-expected-failures.txt. The guest
# serves the critest stand-in images itself (make critest builds them).
vm-critest: build setup vm-tools ## the whole CRI validation suite in the VM (cgroup v2, systemd driver)
	test/vm/critest.sh --timeout 5400

# vm-checks' sample of critest's resource, stats, security-context and mount groups (each spec
# takes 20-40 s in the guest); VM_CRITEST_GROUPS='Security Context|Container Mount|Container
# OOM|stats' runs the four groups whole (about 50 specs).
VM_CRITEST_GROUPS ?= Container OOM|listing stats|Privileged is true|Container Mount Propagation
export VM_CRITEST_GROUPS
vm-critest-groups: build setup vm-tools ## vm-checks' sample of critest's OOM, stats, privileged and mount specs in the VM
	test/vm/critest.sh --focus '$(VM_CRITEST_GROUPS)' --timeout 5400

##@ Benchmarks (docs/benchmarks.md)

# The last lines compare with upstream cri-dockerd v0.4.3, built once from the module proxy
# (hack/upstream.sh), on one private dockerd: 200 concurrent RunPodSandbox, and a
# node of 100 and 250 pods (lists, a status sweep, RSS, restart, 100 pods started 16 at a time),
# StopPodSandbox alone (Docker's bridge, CNI, and with the pod's container still running);
# then bench-density, pods started through the real kubelet.
bench: build setup ## every benchmark, ours against raw Docker and upstream v0.4.3
	$(GO) test -tags integration -run XXX -bench . -skip 'Stats|ContainerEventLatency|ConcurrentRunPodSandbox|NodeFullOfPods|StopPodSandbox' -benchtime 20x -timeout 30m ./integration/...
	$(GO) test -tags integration -run XXX -bench 'Stats|ContainerEventLatency' -benchtime 3x -timeout 30m ./integration/
	CRI_DOCKERD_UPSTREAM=$$(hack/upstream.sh) $(GO) test -tags integration -run XXX \
		-bench 'ConcurrentRunPodSandbox|NodeFullOfPods' -benchtime 1x -timeout 60m ./integration/
	CRI_DOCKERD_UPSTREAM=$$(hack/upstream.sh) $(GO) test -tags integration -run XXX \
		-bench 'StopPodSandbox' -benchtime 20x -timeout 30m ./integration/
	$(MAKE) bench-density

# Pod startup density through the real kubelet, ours and upstream in one run
# (test/e2e/density-bench.sh; DENSITY_COUNTS=10,100 by default).
bench-density: build setup ## pods started through the real kubelet, ours and upstream
	test/e2e/density-bench.sh $(BIN) $$(hack/upstream.sh)

##@ Release

# Release artifacts in dist/ (docs/packages.md): for each arch upstream's
# cri-dockerd-VERSION.ARCH.tgz, a .deb and an .rpm (nfpm, its own module in packaging/release),
# and SHA256SUMS. Static binaries (CGO_ENABLED=0), cross-compiled, with the same LDFLAGS.
RELEASE_ARCHES ?= amd64 arm64
release: ## dist/: .tgz, .deb, .rpm per arch (RELEASE_ARCHES) and SHA256SUMS
	rm -rf dist bin/release
	@for arch in $(RELEASE_ARCHES); do echo "building linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o bin/release/linux-$$arch/cri-dockerd ./cmd/cri-dockerd || exit 1; done
	$(GO) -C packaging/release run . -version '$(VERSION)' -root '$(CURDIR)' -bin '$(CURDIR)/bin/release' \
		-dist '$(CURDIR)/dist' -arch '$(RELEASE_ARCHES)' -mtime "$$(git log -1 --format=%ct 2>/dev/null || echo 0)"

# Builds the release and checks it: unit files verified, the amd64 .deb installed into a fresh
# Debian 12 root (debootstrap, cached in /var/cache/cri-dockerd-ci), ELF arches, tgz layout, sums.
release-test: release ## build the release and check it (units, .deb installed in a fresh Debian 12 root, sums)
	@bad=$$(gofmt -l packaging/release); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) -C packaging/release vet ./...
	test/packaging/check.sh

##@ Monitoring

# packaging/monitoring's Grafana dashboard and Prometheus alert rules (test/monitoring/check.sh):
# promtool checks and unit tests of the rules, every dashboard expression parsed, and every
# metric and label name they use found in the scrape of bin/cri-dockerd serving a test pod.
monitoring-test: build setup ## check the dashboard and alert rules (promtool, names against a live /metrics)
	test/monitoring/check.sh $(BIN)

##@ Helpers

# Mutation testing (hours): hack/mutation.sh, docs/mutation.md.
# MUTATION_PKGS picks packages, MUTATION_WORKERS (1) runs that many mutants at a time,
# MUTATION_TIMEOUT_COEF (10) times out a mutant whose tests run that many times longer than the
# package's own test run, MUTATION_EXCLUDE adds gremlins -E file regexps
# (e.g. MUTATION_EXCLUDE='^fake.*\.go$$').
GREMLINS_VERSION := $(shell . test/versions.sh && echo $$GREMLINS_VERSION)
GREMLINS_DIR := /var/cache/cri-dockerd-ci/bin/gremlins-$(GREMLINS_VERSION)
MUTATION_PKGS ?= internal/config internal/containerlog internal/network internal/libdocker internal/core
MUTATION_TIMEOUT_COEF ?= 10
MUTATION_WORKERS ?= 1
MUTATION_EXCLUDE ?=
mutation: ## mutation testing of the unit tests with gremlins (hours)
	@GO='$(GO)' GREMLINS_VERSION='$(GREMLINS_VERSION)' GREMLINS_DIR='$(GREMLINS_DIR)' \
		MUTATION_PKGS='$(MUTATION_PKGS)' MUTATION_WORKERS='$(MUTATION_WORKERS)' \
		MUTATION_TIMEOUT_COEF='$(MUTATION_TIMEOUT_COEF)' MUTATION_EXCLUDE='$(MUTATION_EXCLUDE)' \
		hack/mutation.sh

help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } \
		/^##@ / { printf "\n%s\n", substr($$0, 5); next } \
		/^[a-zA-Z0-9_-]+:.*## / { printf "  %-26s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
