-- The per-aggregate order state (table inbox_aggregates): the position the
-- consumer processed last for each aggregate of each source.

-- InboxAggregateLock locks an aggregate's order state for the transaction
-- deciding one of its events, and returns the position processed last
-- (NULL: none yet) and whether an arrived event of the aggregate failed in
-- its handler within @failing_within (the aggregate waits for it: it is
-- not missing).
-- Lock strategy: SELECT ... FOR UPDATE by primary key: the events of one
-- aggregate are decided one at a time, by one consumer at a time; the lock
-- is taken before any inbox record of the aggregate is touched, always in
-- that order.
-- 0 rows: the inbox has no state for the aggregate yet; create it with
-- InboxAggregateCreate and lock again.
-- name: InboxAggregateLock :one
SELECT last_seq, failing_seq,
       coalesce(failing_at > now() - @failing_within::interval, false)::boolean AS failing_recent
  FROM inbox_aggregates
 WHERE source = @source::text
   AND aggregate_id = @aggregate_id::text
   FOR UPDATE;

-- InboxAggregateCreate creates the order state of an aggregate seen for the
-- first time, with nothing processed.
-- Lock strategy: INSERT ... ON CONFLICT DO NOTHING on the primary key (a
-- concurrent creation wins, and this one changes nothing).
-- name: InboxAggregateCreate :exec
INSERT INTO inbox_aggregates (source, aggregate_id)
VALUES (@source::text, @aggregate_id::text)
ON CONFLICT (source, aggregate_id) DO NOTHING;

-- InboxAggregateAdvance records @seq as the aggregate's position processed
-- last and clears its failure, under the lock of InboxAggregateLock, and
-- says whether events of the aggregate are parked (to release after
-- COMMIT). That answer is exact: parking takes the same lock, and this
-- statement's snapshot is taken after the lock was granted.
-- Index: the primary key; inbox_parked for the parked events.
-- 0 rows: the state does not exist (the caller did not lock it first).
-- Lock strategy: a single-row UPDATE by primary key, under the caller's
-- InboxAggregateLock.
-- name: InboxAggregateAdvance :many
UPDATE inbox_aggregates AS a
   SET last_seq    = @seq::bigint,
       failing_seq = NULL,
       failing_at  = NULL,
       last_error  = NULL,
       updated_at  = now()
 WHERE a.source = @source::text
   AND a.aggregate_id = @aggregate_id::text
RETURNING EXISTS (SELECT 1
                    FROM inbox AS p
                   WHERE p.source = a.source
                     AND p.aggregate_id = a.aggregate_id
                     AND p.status = 'parked')::boolean AS parked;

-- InboxAggregateFailing records that the handler of the aggregate's event
-- @seq failed (in a transaction of its own, after the failed one rolled
-- back): the event has arrived, so no gap is declared for it while it keeps
-- failing.
-- Lock strategy: INSERT ... ON CONFLICT DO UPDATE on the primary key; only
-- the failure columns change.
-- Always one row written (inserted or updated).
-- name: InboxAggregateFailing :exec
INSERT INTO inbox_aggregates AS a (source, aggregate_id, failing_seq, failing_at, last_error)
VALUES (@source::text, @aggregate_id::text, @seq::bigint, now(), left(@error::text, 500))
ON CONFLICT (source, aggregate_id) DO UPDATE
   SET failing_seq = excluded.failing_seq,
       failing_at  = excluded.failing_at,
       last_error  = excluded.last_error;
