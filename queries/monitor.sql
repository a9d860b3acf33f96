-- Monitoring: the seed's section 6, read-only, no locks taken.

-- OutboxCountByStatus: queue depth by status.
-- Scans the table (done rows included); run it at monitoring intervals.
-- name: OutboxCountByStatus :many
SELECT status, count(*) AS count
  FROM outbox
 GROUP BY status
 ORDER BY status;

-- OutboxOldestPendingAge: age in seconds of the oldest undelivered message
-- (pending or processing), on the database clock; 0 when there is none. The
-- most important alert: it grows without bound when dispatch stops.
-- Indexes: outbox_pending, outbox_ordered_head and outbox_leased cover the
-- three branches, so retained done rows are not scanned. Note that the
-- seed's form (status IN ('pending', 'processing')) gives the same answer.
-- name: OutboxOldestPendingAge :one
SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_seconds
  FROM (
        SELECT created_at FROM outbox WHERE status = 'pending' AND NOT ordered
        UNION ALL
        SELECT created_at FROM outbox WHERE status = 'pending' AND ordered
        UNION ALL
        SELECT created_at FROM outbox WHERE status = 'processing'
       ) AS undelivered;

-- OutboxExpiredLeases: processing rows past their lease (crashed workers, or
-- leases too short for the publish time).
-- Index: outbox_leased.
-- name: OutboxExpiredLeases :one
SELECT count(*) AS expired_leases
  FROM outbox
 WHERE status = 'processing'
   AND lease_until < now();

-- OutboxAttemptsHistogram: attempts distribution of undelivered messages
-- (retries piling up).
-- name: OutboxAttemptsHistogram :many
SELECT attempts, count(*) AS count
  FROM outbox
 WHERE status IN ('pending', 'processing')
 GROUP BY attempts
 ORDER BY attempts;

-- OutboxBlockedAggregates: ordered aggregates whose head is dead, or has not
-- been delivered for longer than @stalled_after (database clock), with the
-- size of the backlog waiting behind the head. Oldest first.
-- Index: outbox_ordered_head (undelivered ordered rows only).
-- name: OutboxBlockedAggregates :many
WITH undelivered AS (
    SELECT aggregate_id, count(*) AS backlog, min(created_at) AS oldest_created_at
      FROM outbox
     WHERE ordered AND status IN ('pending', 'processing', 'dead')
     GROUP BY aggregate_id
),
head AS (
    SELECT DISTINCT ON (aggregate_id)
           aggregate_id, id, status, event_type, attempts, last_error
      FROM outbox
     WHERE ordered AND status IN ('pending', 'processing', 'dead')
     ORDER BY aggregate_id, xid, id
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

-- OutboxXactHorizon: how far back the oldest open writing transaction holds
-- the xid horizon (the ordered claim waits for it), and how many ordered
-- pending rows sit at or above the horizon right now.
-- name: OutboxXactHorizon :one
SELECT coalesce((SELECT extract(epoch FROM now() - min(xact_start))
                   FROM pg_catalog.pg_stat_activity
                  WHERE backend_xid IS NOT NULL), 0)::float8 AS oldest_xact_age_seconds,
       (SELECT count(*)
          FROM outbox
         WHERE ordered AND status = 'pending'
           AND xid >= pg_snapshot_xmin(pg_current_snapshot())) AS ordered_waiting_on_horizon;
