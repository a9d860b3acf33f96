-- pgoutbox-inbox-migration: 00001_inbox.sql
-- +goose Up
-- The inbox: what a consumer received, in the consumer's own database, so
-- that the consumer's handler and the record that the event was processed
-- commit or roll back together (package inbox runs both in one transaction).
-- These tables belong to the consuming service, not to the outbox: apply
-- them with their own goose version table (pgoutbox inbox migrate, or the
-- copy `pgoutbox inbox init` writes).

-- inbox: one row per event received, keyed by the CloudEvents identity
-- (source, id): the outbox that produced it and its id there. The primary
-- key is the deduplication: a second delivery of the same event finds the
-- row (its deliveries count goes up) and the handler is not run again; two
-- consumers inserting the same key at once are serialized by the key's
-- index, the second waits for the first to commit or roll back.
CREATE TABLE inbox (
    source       text        NOT NULL,
    id           text        NOT NULL,
    -- processed: the handler ran and committed with this row.
    -- parked: an ordered event that arrived before its predecessor; it is
    --   kept here (payload and headers included) and processed when the
    --   predecessor has been, or when its gap is declared.
    -- late: an ordered event older than one already processed (its gap was
    --   declared before it arrived, or its record was purged before a
    --   redelivery); the handler was not run.
    status       text        NOT NULL
                 CHECK (status IN ('processed', 'parked', 'late')),
    event_type   text        NOT NULL,
    aggregate_id text,                      -- CloudEvents subject
    -- The position in the aggregate's commit order (ordered events only):
    -- seq, the predecessor's seq, and sent_seq, the latest earlier
    -- position the outbox delivered when it skipped the ones after it.
    seq          bigint,
    prev_seq     bigint,
    sent_seq     bigint,
    -- prior_seq: the aggregate's position processed last when this event
    -- was processed (NULL: none), so the order in which the consumer
    -- processed an aggregate's events can be checked afterwards
    -- (pgoutbox verify).
    prior_seq    bigint,
    deliveries   integer     NOT NULL DEFAULT 1,  -- times received, duplicates included
    received_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,                     -- NULL while parked
    -- A parked event's content, cleared when it is processed.
    payload      bytea,
    headers      jsonb,
    event_time   timestamptz,
    -- Handler failures of a parked event (retried by the inbox's sweep).
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    PRIMARY KEY (source, id),
    CONSTRAINT inbox_parked_content CHECK (
        status <> 'parked' OR (payload IS NOT NULL AND seq IS NOT NULL AND aggregate_id IS NOT NULL))
);

-- Parked events by aggregate in position order (the next one to release is
-- the first entry), with their arrival time for the park bound. Partial:
-- only parked rows, normally none.
CREATE INDEX inbox_parked ON inbox (source, aggregate_id, seq)
    INCLUDE (received_at)
    WHERE status = 'parked';

-- Retention: finished records by the time they finished, oldest first.
CREATE INDEX inbox_finished ON inbox (processed_at)
    WHERE status <> 'parked';

-- inbox_aggregates: per aggregate of each source, the position processed
-- last. Locked (FOR UPDATE) by every ordered event of the aggregate before
-- it is decided, so two consumers never decide on the same aggregate at
-- once. Never purged: it is what keeps order after the records themselves
-- are purged (one row per aggregate).
CREATE TABLE inbox_aggregates (
    source        text        NOT NULL,
    aggregate_id  text        NOT NULL,
    last_seq      bigint,                 -- NULL: nothing processed yet
    -- An arrived event whose handler failed: the aggregate waits for it (it
    -- is not missing), so no gap is declared for it.
    -- failing_at is its latest failure: once it is older than the park
    -- bound, the event counts as missing again.
    failing_seq   bigint,
    failing_at    timestamptz,
    last_error    text,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, aggregate_id)
);

-- inbox_gaps: positions that will not be processed before a later event of
-- the aggregate was: the events after after_seq and before before_seq, the
-- predecessor missing_seq among them.
-- skipped: the outbox skipped them (an operator resolved them without
--   delivering), as the later event said.
-- timeout: the predecessor did not arrive within the park bound.
-- overflow: too many events of the aggregate were parked waiting for it.
-- start: the first event the inbox saw of an aggregate had a predecessor,
--   and the inbox is set to start aggregates where it finds them.
CREATE TABLE inbox_gaps (
    source       text        NOT NULL,
    aggregate_id text        NOT NULL,
    before_seq   bigint      NOT NULL,
    after_seq    bigint,
    missing_seq  bigint      NOT NULL,
    reason       text        NOT NULL
                 CHECK (reason IN ('skipped', 'timeout', 'overflow', 'start')),
    detected_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, aggregate_id, before_seq)
);

CREATE INDEX inbox_gaps_detected ON inbox_gaps (detected_at);

-- +goose Down
DROP TABLE inbox_gaps;
DROP TABLE inbox_aggregates;
DROP TABLE inbox;
