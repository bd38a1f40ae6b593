# bernstein: `make run` builds and runs the demo, `make test` runs every test.
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all build run test bench deps vet clean

all: build

deps:
	@scripts/deps.sh

build: deps
	$(GO) build -o bin/bernstein ./cmd/bernstein

run: build
	@scripts/demo.sh

test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...
	GO="$(GO)" scripts/test-e2e.sh

bench: build
	$(GO) run ./bench

clean:
	rm -rf bin
