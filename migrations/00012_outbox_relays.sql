-- pgoutbox-migration: 00012_outbox_relays.sql
-- +goose Up
-- outbox_relays: one row per relay process (dispatcher run), written by the
-- relay itself, for the console's relays page and `pgoutbox stats`: who is
-- relaying this outbox, from which host and version, how much it holds and
-- when it last claimed and finalized. Before this table an operator could
-- only group the claims' lease_owner values, one line per claim and not per
-- relay.
--
-- owner_prefix is the dispatcher's OwnerPrefix (Owner "/" run id "."),
-- the start of every lease_owner it writes, so a row joins its claims.
-- Every relay upserts its row at a low rate (Config.RelayInterval, 5 s by
-- default; never on the per-message path): heartbeat_at, the messages it
-- holds in flight, and its last claim and last finalize, all times on the
-- database clock. A relay that stops gracefully sets stopped_at; one that
-- crashed stops beating (the console calls it silent after three missed
-- beats). Any relay deletes rows that have not beaten for an hour.
--
-- Cost: one single-row upsert per relay and interval; the table holds a
-- row per relay started in the last hour.
CREATE TABLE outbox_relays (
    owner_prefix     text PRIMARY KEY,
    owner            text NOT NULL,
    host             text NOT NULL DEFAULT '',
    pid              integer NOT NULL DEFAULT 0,
    version          text NOT NULL DEFAULT '',
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    in_flight        integer NOT NULL DEFAULT 0,
    last_claim_at    timestamptz,
    last_finalize_at timestamptz,
    stopped_at       timestamptz
);

-- outbox_skipped: skipped messages (migration 00009) by when they were
-- resolved, so the console and the relays' gauges count them apart from the
-- delivered ones without reading the done rows. Skipped rows only: as small
-- as the skipped list.
CREATE INDEX outbox_skipped ON outbox (done_at)
    WHERE status = 'skipped';

-- +goose Down
DROP INDEX outbox_skipped;
DROP TABLE outbox_relays;
