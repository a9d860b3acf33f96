-- Operators' monitoring reads (`pgoutbox stats`): queue depth by status, the
-- attempts distribution and producers' COMMITs waiting for an aggregate's
-- lock. The relay's own gauges are in queries/monitor.sql.

-- OutboxCountByStatus: queue depth by status.
-- Scans the table (done rows included); run it at monitoring intervals.
-- Lock strategy: none (a read; no row locks).
-- name: OutboxCountByStatus :many
SELECT status, count(*) AS count
  FROM outbox
 GROUP BY status
 ORDER BY status;

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
