# Euterpe: `make run` brings up a local stack, `make test` proves it.
GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION       ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -s -w -X github.com/vesta-cx/euterpe/daemon.Version=$(VERSION)
PROGRAMS      := euterpe-edge euterpe-central euterpectl
TEST_TIMEOUT  ?= 20m
# Every test package gets the services scripts/services.sh started for this
# clone (or the servers the user named); see README, Quickstart.
WITH_SERVICES := set -a; . ./.run/env; set +a;

.PHONY: build run test bench cross-arm64 lint clean services

build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(PROGRAMS))

services:
	@scripts/services.sh up

run: build
	@scripts/services.sh up tools
	@scripts/services.sh up redis
	@scripts/services.sh up s3
	@scripts/run.sh

# The race detector needs cgo; the programs themselves are built without it.
test: services
	@$(WITH_SERVICES) CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

bench: services build
	@$(WITH_SERVICES) scripts/bench.sh

cross-arm64:
	@mkdir -p dist/linux-arm64
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/linux-arm64/ $(addprefix ./cmd/,$(PROGRAMS))
	@scripts/check-arm64.sh dist/linux-arm64 $(VERSION) $(PROGRAMS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@scripts/settings-table.sh --check

clean:
	rm -rf bin dist
