# gpunex — see README.md. `make devnet` runs a local marketplace; `make test` runs the tests.
GO      := $(shell .ci/ensure-go)
BIN     := bin/gpunex
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/gpunex/gpunex/node/api.Version=$(VERSION)
# go-nvml's header marks many NVML calls deprecated: without this, every cgo build prints
# about 200 lines of warnings about code we do not call.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Each fuzzer runs this long in `make test`; run `make fuzz FUZZTIME=5m` for a real session.
FUZZTIME ?= 5s
PROVIDERS ?= 4

.PHONY: build deps devnet test unit fmt-check vet cross fuzz bench adversary clean package package-arm64 image scale soak

# The Debian package (make package): built with nfpm, run as a Go tool at a pinned version.
NFPM       := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
ARCH       := $(shell $(GO) env GOARCH)
HOSTARCH   := $(shell $(GO) env GOHOSTARCH)
# The C cross-compiler of each architecture, for a package of another one (go-nvml is cgo).
CROSSCC_arm64 := aarch64-linux-gnu-gcc
CROSSCC_amd64 := x86_64-linux-gnu-gcc
# Sorts by build time, so that a newer package upgrades an older one.
DEBVERSION := 0.1.0+git$(shell date -u +%Y%m%d%H%M).$(subst -,.,$(VERSION))

build: deps
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gpunex

## deps: the Debian packages needed (gcc for go-nvml, containerd, runc, containernetworking-plugins, iptables, busybox-static), when missing
deps:
	@.ci/install-deps

## devnet: a coordinator, $(PROVIDERS) providers with simulated GPUs and a renter, in ./devnet
devnet: build deps
	$(BIN) devnet --dir devnet --providers $(PROVIDERS)

## package: the Debian package of gpunex in dist/ (binary, a systemd unit per role, installer, docs),
## for this machine's architecture or ARCH=arm64 / ARCH=amd64 (cross-built with that C compiler)
package: build
	rm -rf build/package && mkdir -p build/package dist
	if [ "$(ARCH)" = "$(HOSTARCH)" ]; then cp $(BIN) build/package/gpunex; else \
	  GOARCH=$(ARCH) CGO_ENABLED=1 CC=$(CROSSCC_$(ARCH)) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o build/package/gpunex ./cmd/gpunex; fi
	for r in provider renter coordinator; do $(BIN) service unit --role $$r > build/package/gpunex-$$r.service; done
	rm -f dist/gpunex_*_$(ARCH).deb
	GPUNEX_ARCH=$(ARCH) GPUNEX_VERSION=$(DEBVERSION) $(GO) run $(NFPM) pkg --packager deb --config nfpm.yaml --target dist/

## image: the OCI image of the node for renters, coordinators and auditors, built without a
## container daemon (image.sh): dist/gpunex_<version>_<arch>.oci.tar
image: deps
	mkdir -p build/image dist
	GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o build/image/gpunex ./cmd/gpunex
	rm -f dist/gpunex_*_$(ARCH).oci.tar
	./image.sh build/image/gpunex $(DEBVERSION) $(ARCH) dist/gpunex_$(DEBVERSION)_$(ARCH).oci.tar

## test: formatting, vet, the package, every test (real libp2p hosts on loopback, the real binary, the package in a throwaway root), short fuzzing
test: deps fmt-check vet cross package package-arm64 image unit fuzz

## package-arm64: the arm64 Debian package (Grace Hopper and other arm64 GPU hosts), cross-built
package-arm64:
	$(MAKE) package ARCH=arm64

fmt-check:
	@out=$$($(dir $(GO))gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## cross: the CLI builds for renters and auditors on macOS and Windows (no NVML, no jobs
## there), and the tests compile there (vet type-checks them)
cross:
	GOOS=darwin CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/gpunex
	GOOS=windows CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/gpunex
	GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...
	GOOS=windows CGO_ENABLED=0 $(GO) vet ./...

unit:
	GPUNEX_PACKAGE=$$(ls -t dist/gpunex_*_$(ARCH).deb 2>/dev/null | head -1) \
	GPUNEX_PACKAGE_ARM64=$$(ls -t dist/gpunex_*_arm64.deb 2>/dev/null | head -1) \
	GPUNEX_IMAGE=$$(ls -t dist/gpunex_*_$(ARCH).oci.tar 2>/dev/null | head -1) $(GO) test -count=1 -timeout 40m ./...

fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) >/tmp/gpunex-fuzz.log 2>&1 || \
	    { ! grep -q 'Failing input written' /tmp/gpunex-fuzz.log && grep -q 'context deadline exceeded' /tmp/gpunex-fuzz.log && \
	      echo "  (go's fuzzer timed out a worker at the end, no failing input: once more)" && \
	      $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) >/tmp/gpunex-fuzz.log 2>&1; } || \
	    { cat /tmp/gpunex-fuzz.log; exit 1; }; \
	  done; \
	done

## adversary: the scripted adversary, each scenario for ADVERSARY_SECONDS (30) against a
## devnet of real processes, and its table (make test runs each for 2 s)
ADVERSARY_SECONDS ?= 30
adversary: deps
	@$(GO) test ./cmd/gpunex -run '^TestAdversary$$' -count=1 -v -timeout 60m -args -adversary.duration=$(ADVERSARY_SECONDS)s \
	  >/tmp/gpunex-adversary.log 2>&1; status=$$?; \
	  sed -n '/^adversary:/,/^=== NAME/p' /tmp/gpunex-adversary.log | grep -v '^=== NAME'; \
	  grep -E '^ +--- FAIL|^ +adversary_test.go:[0-9]+: [a-z-]+:|^(ok|FAIL)' /tmp/gpunex-adversary.log; \
	  echo "(full log: /tmp/gpunex-adversary.log)"; exit $$status

## soak: the chaos soak, a devnet of real processes (6 providers, 3 renters) under kill -9, a
## failing Solana RPC, full disks, network partitions (iptables, as root) and skewed clocks for
## SOAK (30m), money invariants checked every minute and at the end
## (make test runs it for 3 minutes with seed 1); SOAK_SEED=N replays a run's schedule
SOAK ?= 30m
SOAK_SEED ?= 0
soak: deps
	@$(GO) test ./cmd/gpunex -run '^TestSoak$$' -count=1 -v -timeout 0 -args -soak.duration=$(SOAK) -soak.seed=$(SOAK_SEED) \
	  >/tmp/gpunex-soak.log 2>&1; status=$$?; \
	  grep -E 'soak_test.go:[0-9]+: (soak|  )' /tmp/gpunex-soak.log | sed -E 's/^ +soak_test.go:[0-9]+: //'; \
	  grep -E '^(--- |ok|FAIL)' /tmp/gpunex-soak.log; echo "(full log: /tmp/gpunex-soak.log)"; exit $$status

## scale: the scale harness, NODES providers and RENTERS renters in one process, linked over
## QUIC on loopback or, with LINKS=mocknet, simulated in memory (not part of `make test`)
NODES ?= 100
RENTERS ?= 20
LINKS ?= quic
scale:
	$(GO) test -tags scale -run '^TestScaleHarness$$' -count 1 -timeout 120m -v ./node/ -args -scale.providers=$(NODES) -scale.renters=$(RENTERS) -scale.links=$(LINKS) -scale.out=scale-$(NODES)-$(LINKS).txt

## screenshots: the dashboard's tabs, as the browser test sees them, into docs/dashboard/
screenshots: deps
	mkdir -p docs/dashboard
	GPUNEX_DASHBOARD_SHOTS=$(CURDIR)/docs/dashboard $(GO) test -count=1 -run '^TestDashboardInBrowser$$' ./node/

## bench: the performance figures of the issues (not part of `make test`)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./protocol/
	$(GO) test -run '^$$' -bench . -skip 'Payouts1000|BenchmarkRun' -benchtime 40x -timeout 30m ./node/
	$(GO) test -run '^$$' -bench Payouts1000 -benchtime 1x -timeout 10m ./node/
	$(GO) test -run '^$$' -bench BenchmarkRun -benchtime 3x -timeout 10m ./node/
	$(GO) test -run '^$$' -bench ChargeReports -benchtime 20x ./ledger/
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 10m ./cmd/gpunex/
	$(GO) test -run '^$$' -bench 'StartVsBare' -benchtime 25x -count 3 -timeout 10m ./sandbox/

clean:
	rm -rf bin devnet
