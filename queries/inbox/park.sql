-- Parked events: ordered events that arrived before their predecessor, kept
-- in table inbox (status parked, payload and headers included) until they
-- can be processed in order or their gap is declared.

-- InboxParkedNext returns the parked event of an aggregate with the lowest
-- position (the next one to release), whether it has waited longer than
-- @max_age (database clock), and how many events of the aggregate are
-- parked.
-- Lock strategy: FOR UPDATE on the returned row, taken under the
-- aggregate's lock (InboxAggregateLock), so only a duplicate delivery of
-- the same event can wait for it.
-- Index: inbox_parked (source, aggregate_id, seq), partial on parked rows.
-- 0 rows: nothing parked for the aggregate.
-- name: InboxParkedNext :one
SELECT i.id, i.event_type, i.seq, i.prev_seq, i.sent_seq, i.payload, i.headers, i.event_time,
       i.received_at, i.attempts,
       (i.received_at < now() - @max_age::interval)::boolean AS overdue,
       (SELECT count(*)
          FROM inbox AS p
         WHERE p.source = i.source
           AND p.aggregate_id = i.aggregate_id
           AND p.status = 'parked')::bigint AS parked
  FROM inbox AS i
 WHERE i.source = @source::text
   AND i.aggregate_id = @aggregate_id::text
   AND i.status = 'parked'
 ORDER BY i.seq
 LIMIT 1
   FOR UPDATE OF i;

-- InboxParkedFinish ends a parked event: processed (its handler ran in this
-- transaction) or late (not processed). Its payload and headers are
-- cleared; @prior_seq is the aggregate's position before it.
-- 0 rows: it is no longer parked (finished by another consumer).
-- Lock strategy: a single-row UPDATE by primary key, guarded by the parked
-- status.
-- name: InboxParkedFinish :execrows
UPDATE inbox
   SET status       = @status::text,
       processed_at = now(),
       prior_seq    = sqlc.narg('prior_seq')::bigint,
       payload      = NULL,
       headers      = NULL
 WHERE source = @source::text
   AND id = @id::text
   AND status = 'parked';

-- InboxParkedFailed counts a failed handler run of a parked event (in a
-- transaction of its own, after the failed one rolled back); the next sweep
-- tries it again.
-- 0 rows: it is no longer parked.
-- Lock strategy: a single-row UPDATE by primary key, guarded by the parked
-- status.
-- name: InboxParkedFailed :execrows
UPDATE inbox
   SET attempts   = attempts + 1,
       last_error = left(@error::text, 500)
 WHERE source = @source::text
   AND id = @id::text
   AND status = 'parked';

-- InboxParkedAggregates lists the aggregates with parked events, oldest
-- wait first, at most @max_rows: the sweep releases what can go and
-- declares the gaps that are due. overdue: the oldest waited longer than
-- @max_age (database clock) or more than @max_parked are parked.
-- Index: inbox_parked (partial: parked rows only, normally none).
-- 0 rows: nothing is parked.
-- Lock strategy: none (a read; no row locks).
-- name: InboxParkedAggregates :many
SELECT source, coalesce(aggregate_id, '')::text AS aggregate_id,
       count(*)::bigint AS parked,
       extract(epoch FROM now() - min(received_at))::float8 AS oldest_age_seconds,
       (min(received_at) < now() - @max_age::interval OR count(*) > @max_parked::bigint)::boolean AS overdue
  FROM inbox
 WHERE status = 'parked'
 GROUP BY source, aggregate_id
 ORDER BY min(received_at)
 LIMIT @max_rows::integer;
