# nodeflow: per-node OpenFlow controller for Open vSwitch.
#
#   make deps    install the Debian packages and Go tools the project needs (idempotent; root)
#   make build   build the binaries into bin/
#   make test    run every test, OVS integration and end-to-end tests included
#   make bench   run the benchmarks
#   make lint    gofmt, go vet, staticcheck
#   make demo    bring up the testbed and run traffic (see README)

GO          ?= go
BIN         := bin
DEB_PKGS    := openvswitch-switch openvswitch-common iproute2 ethtool iputils-ping curl tcpdump
STATICCHECK_VERSION := v0.8.2
GOBIN       := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
TEST_FLAGS  ?=
BENCH       ?= .

.PHONY: all deps build test unit bench lint demo clean

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
	$(GO) build -o $(BIN)/ ./cmd/...

# NODEFLOW_REQUIRE_OVS turns "skip: OVS missing" into a failure, so the
# integration tests can never pass by not running.
test: deps
	NODEFLOW_REQUIRE_OVS=1 $(GO) test -count=1 -timeout 45m $(TEST_FLAGS) ./...

bench:
	NODEFLOW_REQUIRE_OVS=1 $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -timeout 60m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...

demo:
	@echo "nodeflow demo: the testbed (a local multi-node cluster with the agent and a service)"
	@echo "is not built yet. What works today: private OVS sandboxes, the OVSDB client and the"
	@echo "OpenFlow codec, all exercised by 'make test'. Nothing was started."

clean:
	rm -rf $(BIN)
