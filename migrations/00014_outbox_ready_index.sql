-- pgoutbox-migration: 00014_outbox_ready_index.sql
-- +goose NO TRANSACTION
-- +goose Up
-- Pending unordered rows are indexed once instead of twice. Every unordered
-- INSERT wrote an entry into outbox_pending (id, available_at) and one into
-- outbox_pending_txid (txid, id), both partial on status = 'pending' AND NOT
-- ordered, at about 75 B of WAL each (measured with pgbench-style single-row
-- inserts: 437 B of WAL per insert with both, 361 B without outbox_pending,
-- 286 B with the primary key alone, 230 B for a table without indexes). The
-- relay's claim (OutboxClaimWindow) reads outbox_pending_txid only, and the
-- other readers of outbox_pending now read it too:
-- * OutboxClaim and OutboxIsolateClaim take pending rows in (txid, id)
--   order: oldest transaction first, insertion order within one. A row made
--   pending again (a retry, a defer, a redrive) carries the txid of the
--   transaction that did that, so it queues behind the rows already waiting
--   then. Rows not yet due (in backoff, deferred, scheduled for later) are no
--   longer skipped inside the index: the claims pass over them on their
--   table rows.
-- * The queue-depth gauge counts pending unordered rows from
--   outbox_pending_txid alone (index only), as it did from outbox_pending.
-- * The console's oldest pending message comes from the first entries of
--   outbox_pending_txid and of outbox_pending_due (see
--   OutboxConsoleStatusCounts).
-- DROP INDEX CONCURRENTLY blocks neither producers nor relays: it waits for
-- the transactions using the table to finish, then drops the index. It
-- cannot run inside a transaction block, hence NO TRANSACTION (goose runs
-- the statement alone; apply the file the same way if you apply it by hand).
-- Relays of earlier versions keep working on the new schema, but their
-- fallback claim (OutboxIsolateClaim, after a claim failed on one row)
-- orders by id and needs this index: upgrade them as well.
DROP INDEX CONCURRENTLY IF EXISTS outbox_pending;

-- +goose Down
-- Rebuilt without blocking writes (two scans of the table). If the build
-- fails (or is cancelled) it leaves an invalid outbox_pending behind: drop
-- that index and run the Down again.
CREATE INDEX CONCURRENTLY outbox_pending ON outbox (id, available_at)
    WHERE status = 'pending' AND NOT ordered;
