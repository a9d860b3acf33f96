-- pgoutbox-migration: 00006_outbox_done_at.sql
-- +goose NO TRANSACTION
-- +goose Up
-- Delivered messages by time, for the web console's throughput and
-- end-to-end latency charts (queries/console.sql,
-- OutboxConsoleDeliveredPerMinute) and for purge, which selects done rows by
-- done_at. Without it, "what was delivered in the last hour" reads every
-- retained done row (a sequential scan of the table).
-- created_at is an INCLUDE column so latency (done_at - created_at) comes
-- from the index alone on all-visible pages.
-- Cost: one more index entry per delivered message (the finalize already
-- writes a new row version, never a HOT update, because status is in every
-- partial index's predicate), and about 30 bytes per retained done row.
-- CONCURRENTLY (outside a transaction): adding it to a table that already
-- holds millions of rows does not block producers or relays.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_done_at ON outbox (done_at) INCLUDE (created_at)
    WHERE status = 'done';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS outbox_done_at;
