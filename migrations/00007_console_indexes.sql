-- pgoutbox-migration: 00007_console_indexes.sql
-- +goose Up
-- outbox_ordered_dead_head: the dead heads of ordered aggregates (column
-- head, migration 00005), oldest first: the aggregates a dead message
-- blocks. The console's blocked page and the overview's blocked count
-- (OutboxConsoleBlocked, OutboxConsoleBlockedCount in queries/console.sql)
-- start from these entries and from the live heads (outbox_ordered_txid,
-- outbox_ordered_due, outbox_leased), instead of grouping every undelivered
-- ordered row by aggregate: measured on 10,000,000 rows with 2,000 blocked
-- aggregates behind 30,000 undelivered ordered rows, the blocked page went
-- from 17,130 buffers to 1,650 (see the queries for the figures).
--
-- Cost to producers and relays: none on the hot path. Only a head that dies
-- enters the index (the finalize to dead writes a new row version in any
-- case: status is in every partial index's predicate, so it is never a HOT
-- update); pending, claimed and delivered rows, ordered or not, never
-- enter it, and a dead head leaves it when it is retried or skipped. Size:
-- one entry per blocked aggregate (about 60 kB for 2,000).
CREATE INDEX outbox_ordered_dead_head ON outbox (created_at, id)
    INCLUDE (aggregate_id)
    WHERE ordered AND head AND status = 'dead';

-- +goose Down
DROP INDEX outbox_ordered_dead_head;
