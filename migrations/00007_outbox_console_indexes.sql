-- pgoutbox-migration: 00007_outbox_console_indexes.sql
-- +goose Up
-- outbox_ordered_dead_head: the dead heads of ordered aggregates (column
-- head, migration 00005), oldest first: the aggregates a dead message
-- blocks. The console's blocked page and the overview's blocked count
-- (OutboxConsoleBlocked, OutboxConsoleBlockedCount in queries/console.sql)
-- start from these entries and from the live heads (outbox_ordered_txid for
-- pending heads, outbox_leased), instead of grouping every undelivered
-- ordered row by aggregate. Measured on 10,000,000 rows (9.9 million done)
-- with 2,000 aggregates blocked behind dead heads and 29,919 undelivered
-- ordered rows: the blocked page's query from 17,130 buffers to 2,159 and
-- from 30 ms to 4 ms of backend CPU; the overview's blocked count from
-- 19,820 buffers to 53.
--
-- Cost to producers and relays: none on the hot path. Only a head that dies
-- enters the index (the finalize to dead writes a new row version in any
-- case: status is in every partial index's predicate, so it is never a HOT
-- update); pending, claimed and delivered rows, ordered or not, never
-- enter it, and a dead head leaves it when it is retried or skipped. Size:
-- one entry per aggregate blocked by a dead head (104 kB for 2,000). Built
-- in 2 s on that table (CREATE INDEX blocks writes meanwhile).
CREATE INDEX outbox_ordered_dead_head ON outbox (created_at, id)
    INCLUDE (aggregate_id)
    WHERE ordered AND head AND status = 'dead';

-- +goose Down
DROP INDEX outbox_ordered_dead_head;
