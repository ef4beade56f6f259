# Euterpe: `make run` brings up a local stack, `make test` proves it.
GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION       ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -s -w -X github.com/vesta-cx/euterpe/daemon.Version=$(VERSION)
PROGRAMS      := euterpe-edge euterpe-central euterpectl
TEST_TIMEOUT  ?= 25m
# Packages: nfpm run as a pinned tool, so its dependencies stay out of go.mod.
NFPM          := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
# Evaluated once, so the packages built and the checks agree even if the
# tree changes while make runs; and only for them (it asks git, which a
# source tree without .git cannot answer).
ifndef DEB_VERSION
ifneq ($(filter packages%,$(MAKECMDGOALS)),)
DEB_VERSION   := $(shell packaging/debversion.sh)
endif
endif
STAMPED       := $(VERSION)
DEB_ARCHES    := amd64 arm64
DEB_MAINTAINER ?= Euterpe maintainers <maintainers@vesta-cx.invalid>
# Every test package gets the services scripts/services.sh started for this
# clone (or the servers the user named); see README, Quickstart.
WITH_SERVICES := set -a; . ./.run/env; set +a;

.PHONY: build run test bench bench-peers chaos chaos-short cross-arm64 lint clean services packages packages-check

build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(PROGRAMS))

services:
	@scripts/services.sh up

run: build
	@scripts/services.sh up run-tools
	@scripts/services.sh up redis
	@scripts/services.sh up s3
	@scripts/run.sh

# The race detector needs cgo; the programs themselves are built without it.
test: services
	@$(WITH_SERVICES) CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

bench: services build
	@$(WITH_SERVICES) scripts/bench.sh

# River, Asynq and goqite next to the matching Euterpe burn-downs, one table
# of ratios; the peers live in their own module (bench/peers).
bench-peers: services
	@$(WITH_SERVICES) scripts/bench-peers.sh

# Random SIGKILLs, pauses, database and Redis restarts on real processes,
# then an audit of every job and event (tables in .run/chaos/), then every
# fuzz target for a bounded time. Not part of `make test`; sizes in
# scripts/chaos.sh. chaos-short is the CI's smaller run.
chaos: services
	@scripts/chaos.sh

chaos-short: services
	@EUTERPE_CHAOS_CENTRAL_JOBS=$${EUTERPE_CHAOS_CENTRAL_JOBS:-400} EUTERPE_CHAOS_EDGE_JOBS=$${EUTERPE_CHAOS_EDGE_JOBS:-2000} \
	  EUTERPE_CHAOS_SSE_CLIENTS=$${EUTERPE_CHAOS_SSE_CLIENTS:-10} EUTERPE_CHAOS_SYNC_JOBS=$${EUTERPE_CHAOS_SYNC_JOBS:-200} \
	  EUTERPE_CHAOS_PIPELINE_JOBS=$${EUTERPE_CHAOS_PIPELINE_JOBS:-150} EUTERPE_CHAOS_FUZZTIME=$${EUTERPE_CHAOS_FUZZTIME:-200x} \
	  EUTERPE_CHAOS_FUZZ_GUIDED=$${EUTERPE_CHAOS_FUZZ_GUIDED:-0} EUTERPE_CHAOS_CRASH_TESTS=0 EUTERPE_CHAOS_TIMEOUT=10m scripts/chaos.sh

cross-arm64:
	@mkdir -p dist/linux-arm64
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/linux-arm64/ $(addprefix ./cmd/,$(PROGRAMS))
	@scripts/check-arm64.sh dist/linux-arm64 $(VERSION) $(PROGRAMS)

# dist/euterpe-{edge,central}_<DEB_VERSION>_{amd64,arm64}.deb, each with euterpectl.
packages:
	@set -e; for arch in $(DEB_ARCHES); do \
	  mkdir -p dist/linux-$$arch; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/linux-$$arch/ $(addprefix ./cmd/,$(PROGRAMS)); \
	  for pkg in euterpe-edge euterpe-central; do \
	    ARCH=$$arch DEB_VERSION='$(DEB_VERSION)' DEB_MAINTAINER='$(DEB_MAINTAINER)' SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) \
	      $(GO) run $(NFPM) package --config packaging/$$pkg.yaml --packager deb --target dist/$${pkg}_$(DEB_VERSION)_$$arch.deb; \
	  done; \
	done

# Inspects the packages, runs the arm64 programs under qemu-user and, as
# root on a machine without a running systemd, installs, upgrades, removes
# and purges the amd64 ones (packaging/check). Not part of `make test`.
packages-check: packages
	cd packaging && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd packaging && EUTERPE_DIST=$(CURDIR)/dist DEB_VERSION='$(DEB_VERSION)' VERSION='$(STAMPED)' \
	  $(GO) test -count=1 -v -timeout 15m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags chaos ./cmd/euterpe-central/ ./sync/e2e/
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags chaos ./cmd/euterpe-central/ ./sync/e2e/
	cd bench/peers && $(GO) vet ./...
	@scripts/settings-table.sh --check

clean:
	rm -rf bin dist
