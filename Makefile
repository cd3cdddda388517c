# karmada-exec-gateway. `make demo` and `make test` are the two commands a
# newcomer runs; everything else is a piece of those.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
TOOLS_DEPS := hack/tools/go.mod hack/tools/go.sum hack/tools/version.mk hack/go-build-cached.sh
include hack/tools/version.mk
# Linked binaries kept between runs, per checkout (hack/link-cache-dir.sh says
# why): make unit and make soak's test binaries, hack/e2e.sh's, the demo's
# gateway (e2e/env reads it from the environment).
LINK_CACHE ?= $(shell hack/link-cache-dir.sh)
export LINK_CACHE
# Every Go build here but the race detector's is built as the gateway image
# is (Dockerfile): without cgo, with -trimpath. One configuration lets the
# tools, vet, the test binaries and the image's gateway reuse each other's
# compiled packages: a package's build cache key includes its cgo setting
# (through net and os/user, almost everything) and -trimpath, so each
# configuration compiled the Kubernetes client libraries once more.
# Kubernetes and etcd release their binaries built this way too. -race
# needs cgo: its builds set CGO_ENABLED=1, and gcc comes with the node
# runtime.
export CGO_ENABLED := 0
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(GOFLAGS)))
# helm reports the Kubernetes version it renders for from link-time variables;
# without them it renders as 1.20 and the chart's kubeVersion check fails.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=v3.21.4 \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37

# The gateway image: the chart's default (image.repository, tag = appVersion),
# so `make image PUSH=1` publishes what the chart runs.
VERSION ?= $(shell sed -n 's/^appVersion: "\(.*\)"$$/\1/p' charts/gateway/Chart.yaml)
IMAGE ?= ghcr.io/karmada-exec-gateway/karmada-exec-gateway:$(VERSION)
PUSH ?=

.PHONY: all build image ca-certificates test unit e2e compat demo tools karmada node-runtime node-client shellcheck chart kind-karmada kind-karmada-down fuzz soak bench vet fmt clean e2e-hung

all: build

build:
	$(GO) build -o $(BIN)/gateway ./cmd/gateway

## image: the gateway image as an OCI archive in _output/image, reproducible per
## commit, without Docker; IMAGE=... PUSH=1 also pushes it (docker login's creds).
image: ca-certificates
	cd e2e && $(GO) run ./cmd/gateway-image -repo .. -image $(IMAGE) -version $(VERSION) \
		-out $(CURDIR)/_output/image/karmada-exec-gateway.tar $(if $(PUSH),-push)

## tools: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
## kubectl, etcd and helm from the tools module (hack/tools), SeaweedFS's weed (the
## S3 store recordings are uploaded to) from hack/seaweedfs, Karmada from its
## source at one pinned commit, shellcheck and Prometheus from Debian, and the
## nodes' runtime from Debian (containerd, runc, CNI plugins, busybox-static,
## gcc for Kubernetes' pause.c and the race detector, iproute2). The pods' images
## are built from those locally when an environment starts (cached in
## _output/images). node-client: e2e/nodeclient's packages from the npm
## registry (@kubernetes/client-node, for TestNodeClient), with Node.js and
## npm from Debian where the machine has none.
TOOLS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubelet $(BIN)/kubectl $(BIN)/etcd $(BIN)/helm $(BIN)/weed karmada node-runtime shellcheck prometheus asciinema node-client
tools: $(TOOLS)

# The tools module's binaries are built in one build list that requires the
# product's versions of the libraries they share (make vet checks it), in the
# configuration above: each finds the Kubernetes client libraries compiled
# already, where a cold run used to compile them once per module, cgo
# setting and -trimpath. kubectl is static like the rest: its image
# (e2e/images) has no libc.
KUBE_BINARIES := kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl

$(KUBE_BINARIES:%=$(BIN)/%): $(BIN)/%: $(TOOLS_DEPS)
	LDFLAGS="$(KUBE_LDFLAGS)" GO=$(GO) hack/go-build-cached.sh hack/tools k8s.io/kubernetes/cmd/$* $@

$(BIN)/helm: $(TOOLS_DEPS)
	LDFLAGS="$(HELM_LDFLAGS)" GO=$(GO) hack/go-build-cached.sh hack/tools helm.sh/helm/v3/cmd/helm $@

## karmada: karmada-aggregated-apiserver, -controller-manager, -scheduler, -agent and
## -webhook built from Karmada's source at KARMADA_COMMIT into bin/karmada/,
## the source kept in _output/karmada-src (the e2e environment applies its
## CRDs and manifests). The source is KARMADA_SRC_ARCHIVE if that file exists
## (an offline copy of the tree; by default the one a workspace may keep in
## ../shared), else a git clone. Rebuilt only when the commit changes.
## KARMADA_VERSION=v1.18.2 builds that release tag instead, into
## bin/karmada-v1.18.2/ and _output/karmada-src-v1.18.2 (make compat's matrix).
KARMADA_COMMIT := f8fdd02df
KARMADA_VERSION ?=
KARMADA_REF := $(or $(KARMADA_VERSION),$(KARMADA_COMMIT))
KARMADA_SUFFIX := $(if $(KARMADA_VERSION),-$(KARMADA_VERSION))
KARMADA_SRC_ARCHIVE ?= $(abspath $(CURDIR)/../shared/karmada/src/karmada-$(KARMADA_REF).tar.gz)
karmada:
	@KARMADA_COMMIT=$(KARMADA_REF) KARMADA_SRC_ARCHIVE=$(KARMADA_SRC_ARCHIVE) \
		BIN_DIR=$(BIN) KARMADA_OUT=$(BIN)/karmada$(KARMADA_SUFFIX) \
		SRC_DIR=$(CURDIR)/_output/karmada-src$(KARMADA_SUFFIX) GO=$(GO) hack/build-karmada.sh

# etcd at the version Kubernetes' own client requires, not Debian's 3.4.23:
# the apiservers' watch caches ask etcd for progress on demand
# (RequestWatchProgress, 3.4.31+ or 3.5.13+). With 3.4.23 they could only be
# kept current by periodic progress notifications to every watch, which
# were most of an idle environment's CPU.
$(BIN)/etcd: $(TOOLS_DEPS)
	GO=$(GO) hack/go-build-cached.sh hack/tools go.etcd.io/etcd/server/v3 $@

# SeaweedFS, the S3-compatible store the e2e tests upload recordings to, from
# a module of its own (hack/seaweedfs/go.mod says why).
$(BIN)/weed: hack/seaweedfs/go.mod hack/seaweedfs/go.sum hack/go-build-cached.sh
	LDFLAGS="-s -w" GO=$(GO) hack/go-build-cached.sh hack/seaweedfs github.com/seaweedfs/seaweedfs/weed $@

node-runtime:
	@hack/install-node-runtime.sh

# npm ci reinstalls node_modules from package-lock.json; a warm npm cache
# (~/.npm) makes it a few seconds, so it runs only when the lock changed.
node-client: e2e/nodeclient/node_modules/.package-lock.json
e2e/nodeclient/node_modules/.package-lock.json: e2e/nodeclient/package-lock.json
	@command -v npm >/dev/null || hack/install-debian.sh nodejs npm
	cd e2e/nodeclient && npm ci --prefer-offline --no-audit --no-fund
	@touch $@

# The gateway image carries Debian's CA bundle (make image, e2e/images' tests).
ca-certificates:
	@test -f /etc/ssl/certs/ca-certificates.crt || hack/install-debian.sh ca-certificates

shellcheck:
	@command -v shellcheck >/dev/null || hack/install-debian.sh shellcheck

## prometheus: Debian's prometheus and promtool, for the alert rule tests
## (e2e/monitoring) and the dashboard test on a real Prometheus; the packaged
## service is not started.
.PHONY: prometheus
prometheus:
	@hack/install-prometheus.sh

## asciinema: Debian's asciinema, which plays the session recordings the
## gateway writes (pkg/proxy TestTTYSessionRecordedAndPlayed).
.PHONY: asciinema
asciinema:
	@command -v asciinema >/dev/null || hack/install-debian.sh asciinema

## test: the whole suite — unit tests of both modules beside the real e2e
## environment. The e2e shards spend most of their time waiting on Karmada and
## the kubelets, so the unit tests run at the same time; everything they need
## is installed first, so the two never run apt-get at once, and the e2e
## binaries are built first, so the two never compile the same packages at
## once. Each one's output is printed when it ends.
test: vet tools ca-certificates
	GO=$(GO) hack/e2e.sh build
	$(MAKE) --no-print-directory -j2 --output-sync=target unit e2e-run

vet:
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	GO=$(GO) hack/verify-shared-versions.sh

## unit: the product's tests with the race detector; the e2e module's own
## packages (environment, images, chart, monitoring) are test tooling and run
## without it, which takes minutes off their image and chart builds. Test
## binaries are linked without DWARF (-w: stack traces and race reports keep
## their symbols); a fifth of each link's CPU, which the e2e suite beside
## them is short of.
## The test binaries are kept in LINK_CACHE (hack/link-cache-dir.sh), where
## go test relinks only what changed; a directory takes one binary per
## package name, so packages without tests (e2e/bench/cmd/bench beside
## e2e/bench) are left to make vet.
TEST_LDFLAGS := -ldflags=-w
unit: $(BIN)/helm shellcheck prometheus asciinema ca-certificates node-runtime
	CGO_ENABLED=1 $(GO) test -race -count=1 $(TEST_LDFLAGS) -o $(LINK_CACHE)/unit-race/ ./...
	cd e2e && HELM=$(BIN)/helm $(GO) test -count=1 $(TEST_LDFLAGS) -o $(LINK_CACHE)/unit-e2e/ -timeout 20m \
		$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v -E '/e2e$$|/e2e/cmd')

## e2e: the real end-to-end suite in three shards at once: the shared
## environment's tests, the Pull member and hung dependency tests, the Helm
## install and the demo (hack/e2e.sh; E2E_SHARDS=1 for one process).
e2e: tools
	GO=$(GO) hack/e2e.sh

# e2e-run: make e2e with the binaries hack/e2e.sh build made (make test).
.PHONY: e2e-run
e2e-run: tools
	GO=$(GO) hack/e2e.sh run

## e2e-hung: the hung-dependency cases alone (SIGSTOP on karmada-apiserver,
## the aggregated apiserver, a member's apiserver and etcd, one after the
## other in TestPullMember's environment); make e2e runs them with the rest.
e2e-hung: tools
	cd e2e && $(GO) test -count=1 -timeout 20m -v -run '^TestPullMember$$/^hung_dependencies$$' .

## compat: the e2e compatibility subset (smoke, streams, executors, status
## fidelity, member-local pods) against the pinned commit and each supported
## Karmada release, each built on first use; prints a table of test by
## version, kept in _output/compat/compat.md. hack/compat.sh names the
## versions and tests (COMPAT_VERSIONS=..., COMPAT_TESTS=... override them).
## On demand, not in CI: minutes per version once built.
compat: tools
	GO=$(GO) hack/compat.sh

## demo: the local Karmada-like environment with the gateway and a real kubectl exec through it.
# The demo needs no object store: a cold machine skips weed's build.
demo: $(filter-out $(BIN)/weed,$(TOOLS))
	cd e2e && $(GO) run ./cmd/e2e-env

## bench: gateway vs direct paths on the e2e environment, printed as Markdown
## tables of figures and ratios (BENCH_FLAGS=-quick for a short check,
## BENCH_FLAGS=-only=scale-pods,scale-streams for the scale sections alone).
## BENCH_SVG_DIR=docs also redraws docs/scale-pods.svg and docs/scale-streams.svg
## (-svg-dir). BENCH_GATEWAY_CPU=1 is cpuset mode: the gateway alone on CPU 1,
## everything else on the other CPUs. It reports targets met or missed and never fails on a number.
bench: tools
	cd e2e && $(GO) run ./bench/cmd/bench $(if $(BENCH_SVG_DIR),-svg-dir=$(abspath $(BENCH_SVG_DIR))) $(if $(BENCH_GATEWAY_CPU),-gateway-cpu=$(BENCH_GATEWAY_CPU)) $(BENCH_FLAGS)

## chart: lint and render the Helm chart and assert on it (no cluster needed).
chart: $(BIN)/helm shellcheck
	cd e2e && HELM=$(BIN)/helm $(GO) test -count=1 ./chart/

## kind-karmada: the same scenarios on a real Karmada in kind (needs Docker).
kind-karmada:
	hack/kind-karmada.sh
kind-karmada-down:
	hack/kind-karmada.sh down

fuzz:
	$(GO) test ./pkg/proxy -run '^$$' -fuzz '^FuzzRewrite$$' -fuzztime 30s
	$(GO) test ./pkg/identity -run "^$$" -fuzz FuzzStripHeaders -fuzztime 15s
	$(GO) test ./pkg/proxy -run "^$$" -fuzz FuzzAuthorizeModeHeaders -fuzztime 30s
	$(GO) test ./pkg/proxy -run "^$$" -fuzz FuzzServiceProxyRewrite -fuzztime 30s
	$(GO) test ./pkg/streamfollow -run "^$$" -fuzz '^FuzzSPDYScanner$$' -fuzztime 15s
	$(GO) test ./pkg/streamfollow -run "^$$" -fuzz '^FuzzSPDYChannels$$' -fuzztime 15s
	$(GO) test ./pkg/streamfollow -run "^$$" -fuzz '^FuzzWebSocketReader$$' -fuzztime 15s

## soak: mixed passthrough traffic and concurrent checksummed streams through
## the proxy on loopback; SOAK=1m is what CI runs.
SOAK ?= 30m
soak:
	$(GO) test ./pkg/proxy -count=1 $(TEST_LDFLAGS) -o $(LINK_CACHE)/soak/ -run TestSoak -soak $(SOAK) -timeout 60m -v

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) _output $(LINK_CACHE)
