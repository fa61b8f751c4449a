# nodeflow: per-node OpenFlow controller for Open vSwitch.
#
#   make deps    install the Debian packages and Go tools the project needs (idempotent; root)
#   make build   build the binaries into bin/
#   make image   build the OCI image (bin/image, bin/nodeflow-image.tar) for amd64 and arm64, without Docker
#   make test    run every test, OVS integration and end-to-end tests included
#   make bench   run the benchmarks
#   make lint    gofmt, go vet, staticcheck
#   make demo    bring up the testbed and run traffic (see README)
#   make testbed-deps  build the testbed's control plane, agnhost and CoreDNS into a cache outside the repo
#   make e2e     the end-to-end tests alone (part of make test)
#   make conformance  Kubernetes' own [sig-network] e2e tests against a testbed (docs/conformance.md)

GO          ?= go
BIN         := bin
DEB_PKGS    := openvswitch-switch openvswitch-common iproute2 ethtool iputils-ping curl tcpdump nftables podman runc \
               busybox netcat-openbsd bind9-dnsutils iperf util-linux
STATICCHECK_VERSION := v0.8.2
GOBIN       := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
TEST_FLAGS  ?=
BENCH       ?= .
# What `nodeflow version` and the image say; the commit's time makes the
# image reproducible.
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS     := -X main.version=$(VERSION) -X main.commit=$(REVISION)
PLATFORMS   := linux/amd64 linux/arm64

.PHONY: all deps build image test unit bench lint demo clean testbed-deps e2e prereqs conformance

all: build

deps:
	@missing=""; for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	else echo "debian packages: all present"; fi
	@# The Debian package starts the system OVS where systemd runs; nodeflow's
	@# tests use private sandboxes and never touch it.
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# Static binaries for each platform, then the image from them with Go
# tooling alone (cmd/mkimage); it prints the index digest, the same for the
# same commit.
image:
	@for p in $(PLATFORMS); do \
		echo "build $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o $(BIN)/$${p%/*}_$${p#*/}/nodeflow ./cmd/nodeflow || exit 1; \
	done
	$(GO) run ./cmd/mkimage --layout $(BIN)/image --archive $(BIN)/nodeflow-image.tar --ref nodeflow:$(VERSION) \
		--version $(VERSION) --revision $(REVISION) --created $(SOURCE_DATE_EPOCH) \
		$(foreach p,$(PLATFORMS),--bin $(p)=$(BIN)/$(subst /,_,$(p))/nodeflow)

# NODEFLOW_REQUIRE_OVS turns "skip: OVS missing" into a failure, so the
# integration tests can never pass by not running.
test: deps testbed-deps
	@GO=$(GO) testbed/tools/build.sh e2e.test >/dev/null
	@GO=$(GO) testbed/tools/build.sh ginkgo >/dev/null
	NODEFLOW_REQUIRE_OVS=1 $(GO) test -count=1 -timeout 60m $(TEST_FLAGS) ./...

bench:
	NODEFLOW_REQUIRE_OVS=1 $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -timeout 60m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...

# The testbed's control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), built from the versions pinned in testbed/tools
# into $XDG_CACHE_HOME/nodeflow/testbed (or ~/.cache/...). A no-op when current.
testbed-deps:
	@GO=$(GO) testbed/tools/build.sh >/dev/null
	@GO=$(GO) testbed/tools/build.sh agnhost >/dev/null
	@GO=$(GO) testbed/tools/build.sh coredns >/dev/null
	@GO=$(GO) testbed/tools/build.sh regression-issue-74839 >/dev/null

# What the testbed needs from the machine (root, OVS, netns, tun, Go),
# checked in seconds before anything builds for minutes.
prereqs:
	@GO=$(GO) testbed/prereqs.sh

# End-to-end scenarios: bring the testbed up, run them, take it down.
e2e: deps prereqs testbed-deps
	@GO=$(GO) testbed/tools/build.sh e2e.test >/dev/null
	@GO=$(GO) testbed/tools/build.sh ginkgo >/dev/null
	NODEFLOW_REQUIRE_OVS=1 $(GO) test -count=1 -timeout 40m $(TEST_FLAGS) ./testbed/e2e/...

# Installs what is missing (as make test does), checks the machine, builds
# the control plane once, brings up the default testbed, deploys a sample
# Deployment and Service, tries traffic and shows the flows; leaves the
# cluster running. The prerequisites are in this order on purpose: make
# runs them left to right, so a missing prerequisite stops it in seconds.
demo: deps prereqs testbed-deps build
	@testbed/demo.sh

# Kubernetes' own [sig-network] e2e tests against a testbed of their own
# (CONFORMANCE=conformance or services for a subset); the report is in
# _output/conformance (docs/conformance.md).
CONFORMANCE ?= sig-network
conformance: deps prereqs testbed-deps build
	@GO=$(GO) testbed/conformance.sh $(CONFORMANCE)

clean:
	rm -rf $(BIN)
