-- The relay's gauges (its metrics and stats log) and the reads `pgoutbox
-- stats` shares with it: queue depth, oldest pending age, expired leases and
-- blocked aggregates; read-only, no locks taken. Queue depth by status, the
-- attempts distribution and COMMIT waits are operators' reads, in
-- queries/ops/monitor.sql.

-- OutboxQueueDepth: the dispatchers' queue-depth gauges (Config.StatsInterval,
-- every relay): undelivered rows by status, counted exactly through their
-- partial indexes, and the done rows counted up to 10,000 (outbox_finished)
-- and beyond that estimated from the planner's row count (pg_class.reltuples
-- minus the undelivered rows, never below the 10,000 counted): counting all
-- retained done rows would read them all, every StatsInterval, in every
-- relay (OutboxCountByStatus scans the table; `pgoutbox stats` still counts
-- exactly).
-- Indexes: outbox_pending_txid (pending, unordered), outbox_ordered_head
-- (pending, ordered; status is an INCLUDE column), outbox_leased
-- (processing), outbox_dead (dead), outbox_finished (skipped, at most
-- 10,000 entries; done, at most 10,000 entries: each status is its own
-- range of the index). A skipped message is never counted as done.
-- Lock strategy: none (a read; no row locks). Always one row.
-- name: OutboxQueueDepth :one
WITH u AS MATERIALIZED ( -- each count once (inlined, the CASE would repeat them)
    SELECT (SELECT count(*) FROM outbox WHERE status = 'pending' AND NOT ordered)
           + (SELECT count(*) FROM outbox WHERE status = 'pending' AND ordered AND seq IS NOT NULL) AS pending,
           (SELECT count(*) FROM outbox WHERE status = 'processing') AS processing,
           (SELECT count(*) FROM outbox WHERE status = 'dead') AS dead,
           (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE status = 'skipped' LIMIT 10000) AS k) AS skipped,
           (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE status = 'done' LIMIT 10000) AS d) AS done_counted,
           coalesce((SELECT c.reltuples FROM pg_catalog.pg_class AS c WHERE c.oid = to_regclass('outbox')), -1) AS reltuples
)
SELECT u.pending::bigint AS pending,
       u.processing::bigint AS processing,
       u.dead::bigint AS dead,
       u.skipped::bigint AS skipped,
       (CASE WHEN u.done_counted < 10000 THEN u.done_counted
             ELSE greatest(u.reltuples::bigint - u.pending - u.processing - u.dead - u.skipped, u.done_counted) END)::bigint AS done
  FROM u;

-- OutboxOldestPendingAge: age in seconds of the oldest undelivered message
-- (pending or processing), on the database clock; 0 when there is none. The
-- most important alert: it grows without bound when dispatch stops.
-- Indexes: outbox_pending_txid, outbox_ordered_head and outbox_leased cover
-- the three branches, so retained done rows are not scanned (every pending
-- unordered row is read, for its created_at: while they are a large part of
-- the table, the planner may read the table sequentially instead, which
-- then costs less). Note that the plain form (status IN ('pending',
-- 'processing')) gives the same answer: the ordered branch says seq IS NOT
-- NULL so outbox_ordered_head serves it, and an unsequenced ordered row is an
-- uncommitted one (invisible here).
-- Lock strategy: none (a read; no row locks).
-- name: OutboxOldestPendingAge :one
SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_seconds
  FROM (
        SELECT created_at FROM outbox WHERE status = 'pending' AND NOT ordered
        UNION ALL
        SELECT created_at FROM outbox WHERE status = 'pending' AND ordered AND seq IS NOT NULL
        UNION ALL
        SELECT created_at FROM outbox WHERE status = 'processing'
       ) AS undelivered;

-- OutboxExpiredLeases: processing rows past their lease (crashed workers, or
-- leases too short for the publish time).
-- Index: outbox_leased.
-- Lock strategy: none (a read; no row locks). Always one row (0: no expired lease).
-- name: OutboxExpiredLeases :one
SELECT count(*) AS expired_leases
  FROM outbox
 WHERE status = 'processing'
   AND lease_until < now();

-- OutboxBlockedAggregates: ordered aggregates whose head is dead, or has not
-- been delivered for longer than @stalled_after (database clock), with the
-- size of the backlog waiting behind the head. The head is the lowest seq
-- (commit order), as in OutboxClaimOrderedWindow. Oldest first.
-- Index: outbox_ordered_head (undelivered ordered rows only).
-- Lock strategy: none (a read; no row locks).
-- No rows: no aggregate is blocked or stalled.
-- name: OutboxBlockedAggregates :many
WITH undelivered AS (
    SELECT aggregate_id, count(*) AS backlog, min(created_at) AS oldest_created_at
      FROM outbox
     WHERE ordered AND seq IS NOT NULL AND status IN ('pending', 'processing', 'dead')
     GROUP BY aggregate_id
),
head AS (
    SELECT DISTINCT ON (aggregate_id)
           aggregate_id, id, status, event_type, attempts, last_error
      FROM outbox
     WHERE ordered AND seq IS NOT NULL AND status IN ('pending', 'processing', 'dead')
     ORDER BY aggregate_id, seq
)
SELECT head.aggregate_id,
       head.id          AS head_id,
       head.status      AS head_status,
       head.event_type  AS head_event_type,
       head.attempts    AS head_attempts,
       head.last_error  AS head_last_error,
       u.backlog,
       extract(epoch FROM now() - u.oldest_created_at)::float8 AS oldest_age_seconds
  FROM head
  JOIN undelivered AS u USING (aggregate_id)
 WHERE head.status = 'dead'
    OR u.oldest_created_at < now() - @stalled_after::interval
 ORDER BY u.oldest_created_at
 LIMIT @max_rows::integer;
