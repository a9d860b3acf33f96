# pgoutbox — see README.md. Every target works from a clean clone with Go and
# the PostgreSQL server binaries; no global installs (sqlc runs through
# `go tool` at the version pinned in tools.mod, a module file of its own so
# that importers of pgoutbox inherit none of sqlc's requirements; see tools.go).

GO       ?= go
SQLC     := CGO_ENABLED=0 $(GO) tool -modfile=tools.mod sqlc
PKGS     := ./...

.PHONY: all generate verify test test-short bench bench-full demo chaos chaos-long chaos-failover build

all: verify test

## generate: regenerate db/ from queries/ and migrations/ (run after any SQL change)
generate:
	$(SQLC) generate

## verify: generated code current, go.mod and tools.mod tidy, vet, gofmt
verify:
	$(SQLC) diff
	$(GO) mod tidy -diff
	$(GO) mod tidy -modfile=tools.mod -diff
	cd bench && $(GO) mod tidy -diff
	$(GO) vet $(PKGS)
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## test: the whole suite on real PostgreSQL and real brokers, with the race detector
test:
	$(GO) test -race -count=1 $(PKGS)

build:
	$(GO) build -o bin/pgoutbox ./cmd/pgoutbox

## demo: the README's first command — a throwaway PostgreSQL, 4 relays, faults, a report.
## `make demo DEMO_UI=127.0.0.1:8080` also serves the web console there while it runs
## (and after the report, until Ctrl-C).
DEMO_UI ?=
demo:
	$(GO) run ./examples/demo $(if $(DEMO_UI),-ui $(DEMO_UI))

## chaos: the fault-injection suite, short configuration (CI; under 5 minutes):
## a throwaway PostgreSQL, 4 relay processes, 50,000 events, 2 minutes of
## faults. Exits non-zero when an invariant fails. The figures go to stdout and
## to $(CHAOS_OUT), a temp file by default so CI leaves the tree clean;
## `make chaos CHAOS_OUT=RELIABILITY.md` records them in RELIABILITY.md.
CHAOS_SEED ?= 1
CHAOS_OUT  ?= $(or $(TMPDIR),/tmp)/pgoutbox-RELIABILITY-short.md
chaos:
	$(GO) run ./chaos -seed $(CHAOS_SEED) -duration 2m -events 50000 -relays 4 -drain-timeout 2m -out $(CHAOS_OUT) -section short

## chaos-long: 32 minutes of faults, 200,000 events; writes RELIABILITY.md
chaos-long:
	$(GO) run ./chaos -seed 42 -duration 32m -events 200000 -relays 4 -drain-timeout 10m -out RELIABILITY.md -section long

## chaos-failover: the fault-injection suite with a synchronous streaming
## standby (pg_basebackup -R): mid-run the primary is stopped hard and the
## standby promoted; relays and producers follow through a multi-host URL
## (target_session_attrs=read-write). 0 lost, 0 stale writes, every
## duplicate explained, or it exits non-zero. Figures to $(CHAOS_FAILOVER_OUT)
## (`make chaos-failover CHAOS_FAILOVER_OUT=RELIABILITY.md` records them).
CHAOS_FAILOVER_OUT ?= $(or $(TMPDIR),/tmp)/pgoutbox-RELIABILITY-failover.md
chaos-failover:
	$(GO) run ./chaos -failover -seed $(CHAOS_SEED) -duration 90s -events 30000 -relays 4 -drain-timeout 2m -out $(CHAOS_FAILOVER_OUT) -section failover

## bench: the benchmark suite (nested module bench/, one throwaway PostgreSQL,
## about 15 minutes, 8 of them the pinned-horizon item); writes BENCHMARKS.md
## and docs/bench/*.png
bench:
	cd bench && go run ./cmd/bench -out ..

## bench-full: the same with larger runs and more rounds (longer)
bench-full:
	cd bench && go run ./cmd/bench -out .. -full
