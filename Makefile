# bernstein: `make run` builds and runs the demo, `make test` runs every test.
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all build run test chaos bench deps vet clean

all: build

deps:
	@scripts/deps.sh

# Static binaries (no cgo: the pure-Go resolver is all they need) start
# faster than dynamically linked ones (docs/performance.md, Start-up):
# bin/bernstein and bin/bernstein-serve, the HTTP server that 'bernstein
# serve' runs (found beside bernstein).
build: deps
	CGO_ENABLED=0 $(GO) build -o bin/ ./cmd/...

run: build
	@scripts/demo.sh

# The tests that run the CLI use bin/bernstein and bin/bernstein-serve,
# built once here (internal/testbin; without BERNSTEIN_TEST_BIN they build
# both once a run).
test: build
	$(GO) vet ./...
	BERNSTEIN_TEST_BIN=$(CURDIR)/bin/bernstein $(GO) test -count=1 -timeout 30m ./...
	GO="$(GO)" scripts/test-e2e.sh

# A long chaos run: posters in several processes, readers, git maintenance
# and SIGKILLs, then a pushing and a fetching host with readers on the
# fetching one, each for BERNSTEIN_CHAOS_SECONDS (default ten minutes);
# `make test` runs the same harnesses for 20 seconds.
chaos: deps
	BERNSTEIN_CHAOS_SECONDS=$${BERNSTEIN_CHAOS_SECONDS:-600} $(GO) test -count=1 -timeout 90m -run '^TestChaos(Fetch)?$$' -v ./tests

bench: build
	$(GO) run ./bench

clean:
	rm -rf bin
