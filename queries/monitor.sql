-- Monitoring: queue depth, oldest pending age, expired leases, attempts and
-- blocked aggregates; read-only, no locks taken.

-- OutboxCountByStatus: queue depth by status.
-- Scans the table (done rows included); run it at monitoring intervals.
-- Lock strategy: none (a read; no row locks).
-- name: OutboxCountByStatus :many
SELECT status, count(*) AS count
  FROM outbox
 GROUP BY status
 ORDER BY status;

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

-- OutboxAttemptsHistogram: attempts distribution of undelivered messages
-- (retries piling up).
-- Lock strategy: none (a read; no row locks).
-- No rows: nothing undelivered.
-- Index: none: it scans the table (done rows included), as
-- OutboxCountByStatus does; run it at monitoring intervals (`pgoutbox stats`).
-- name: OutboxAttemptsHistogram :many
SELECT attempts, count(*) AS count
  FROM outbox
 WHERE status IN ('pending', 'processing')
 GROUP BY attempts
 ORDER BY attempts;

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

-- OutboxOrderedCommitWaits: producers whose COMMIT is waiting for another
-- transaction of the same aggregate to finish committing (the per-aggregate
-- lock of the trigger outbox_commit_order, migration 00004), and how long the
-- longest has waited. Ordered delivery has no horizon: open transactions
-- elsewhere on the server delay no head, and an ordered row is invisible
-- (and unsequenced) until its own COMMIT. What ordered writes do cost is this
-- wait: commits of one aggregate go one at a time, so a steady non-zero count
-- means a hot aggregate; a wait as long as a transaction means a producer
-- holds the lock from its insert (SET CONSTRAINTS ALL IMMEDIATE, where
-- opposite write orders can also deadlock: PostgreSQL aborts one with
-- SQLSTATE 40P01 after deadlock_timeout).
-- Reads pg_locks (visible to every role, unlike other roles' rows of
-- pg_stat_activity): advisory locks in the single-bigint key space whose
-- upper 32 bits (classid) are this table's oid, not granted, in this database.
-- No index; pg_locks is the lock manager's memory. 0 / 0: nobody waits.
-- The wait starts at pg_locks.waitstart (PostgreSQL 14 and later; read
-- through to_jsonb so that the statement also parses on 13, which has no such
-- column); on 13, at the waiting statement's start (the COMMIT), where this
-- role may see the waiter's pg_stat_activity row, else 0.
-- Lock strategy: none (reads pg_locks). Always one row.
-- name: OutboxOrderedCommitWaits :one
SELECT count(*) AS waiting_commits,
       coalesce(extract(epoch FROM now() - min(coalesce((to_jsonb(l.*) ->> 'waitstart')::timestamptz, a.query_start))), 0)::float8 AS longest_wait_seconds
  FROM pg_catalog.pg_locks AS l
  LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
 WHERE l.locktype = 'advisory'
   AND l.objsubid = 1
   AND NOT l.granted
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
   AND l.classid = to_regclass('outbox')::oid;
