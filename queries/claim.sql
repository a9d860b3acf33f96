-- Claims. Each runs as one autocommit statement (a short transaction): it
-- writes ownership into the row (status, lease_owner, lease_until, and
-- lease_version + 1, the fencing token) and COMMITs before anything is
-- published. FOR UPDATE SKIP LOCKED only keeps two claims from taking the same
-- row at the same moment; after COMMIT the columns carry the ownership.
-- Attempts count here, at claim time, so a message that crashes every worker
-- still reaches max attempts (see OutboxReap).

-- OutboxClaim claims up to @batch unordered messages: pending rows whose
-- available_at has come, first-come in (txid, id) order: oldest transaction
-- first, insertion order within one. txid is the transaction that inserted
-- the row or last made it claimable (a retry, a defer, a hand-back, a
-- redrive: migration 00005), so a message made pending again queues behind
-- the rows that were already waiting.
-- Expired leases (processing past lease_until with attempts left) are
-- re-claimable too, but in isolation: when one exists, the claim
-- returns that single row and nothing else, so a poison message that kills
-- every worker that holds it costs only itself attempts, never the healthy
-- messages that would otherwise be claimed beside it. recovered = true marks
-- such a row, so the caller can also publish it alone (nothing else in
-- flight), which is what keeps the batch-mates safe in the end. With
-- @recover_expired = false the claim takes pending rows only: the dispatcher
-- always passes false and recovers expired leases apart from its main
-- pipeline, one at a time, in its recovery lane (OutboxClaimExpired,
-- queries/isolate.sql). Passing true claims both
-- kinds, for callers that run this query on their own.
-- Lock strategy: FOR UPDATE SKIP LOCKED in both candidate sets.
-- Ordering: expired lease (oldest lease_until) alone, else pending by
-- (txid, id).
-- Indexes: outbox_leased for the expired branch, outbox_pending_txid
-- (txid, id), partial: pending unordered rows only, for the ready branch, so
-- the cost does not grow with retained done/dead rows. No other index
-- delivers these rows in (txid, id) order, so the planner reads it from its
-- start instead of walking the primary key past every done row or sorting
-- the backlog. Rows not yet due (in backoff, deferred, scheduled for later) are
-- passed over on their table rows: a claim visits each of them that sorts
-- before the rows it takes. The dispatcher's own claim,
-- OutboxClaimWindow (queries/window.sql), starts from a cursor instead and
-- finds due rows through outbox_due.
-- The locked rows are updated through id = ANY(ARRAY(...)): one primary-key
-- index scan over the chosen ids, with no join for the planner to get wrong.
-- Joined to the CTE instead (UPDATE ... FROM picked), the planner switched
-- to a hash join over a sequential scan of the whole table once the batch
-- was large (measured at Batch 1,000 on 100,000 rows: 40 ms custom plan,
-- 137 ms generic plan, against 9-16 ms for both with the array; see
-- BENCHMARKS.md). Rows come back in (txid, id) order.
-- 0 rows: nothing claimable right now (or every candidate is locked by a
-- concurrent claim); not necessarily an empty queue.
-- name: OutboxClaim :many
WITH expired AS (
    SELECT id
      FROM outbox
     WHERE status = 'processing'
       AND lease_until < now()
       AND attempts < @max_attempts::integer
       AND NOT ordered
       AND @recover_expired::boolean
     ORDER BY lease_until
     LIMIT 1
       FOR UPDATE SKIP LOCKED
),
ready AS (
    SELECT id
      FROM outbox
     WHERE status = 'pending'
       AND available_at <= now()
       AND NOT ordered
       AND NOT EXISTS (SELECT 1 FROM expired)
     ORDER BY txid, id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE outbox AS o
       SET status        = 'processing',
           lease_owner   = @owner::text,
           lease_until   = now() + @lease::interval,
           lease_version = o.lease_version + 1,
           attempts      = o.attempts + 1
     WHERE o.id = ANY (ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM ready))
    RETURNING o.id, o.lease_version, o.attempts, o.aggregate_type, o.aggregate_id,
              o.event_type, o.payload, o.headers, o.created_at, o.txid
)
-- An expired lease is claimed alone (ready is empty then), so every row
-- returned is recovered exactly when expired found one.
SELECT c.id, c.lease_version, c.attempts, c.aggregate_type, c.aggregate_id,
       c.event_type, c.payload, c.headers, c.created_at,
       EXISTS (SELECT 1 FROM expired)::boolean AS recovered
  FROM claimed AS c
 ORDER BY c.txid, c.id;

-- OutboxReap buries messages whose worker keeps dying: processing rows whose
-- lease expired with every attempt spent go to dead. A poison message never
-- reaches a finalize, so this is the only way it stops being claimed.
-- Run it with every claim (the dispatcher does).
-- Grace: a row is reaped only @grace after its lease expired. An expired
-- lease does not mean the owner crashed: it may have delivered the message
-- and be only late to finalize (database briefly unreachable, a slow
-- commit). Reaped at once, such a message would be buried although it was
-- delivered: `dead retry` would deliver it twice, and in an ordered
-- aggregate it would block every later event behind a delivered one. Within
-- the grace the owner's fenced OutboxMarkDoneMany still succeeds (nobody else can
-- claim the row: attempts >= max). A message that crashes every worker is
-- still buried, only @grace later.
-- @expired_after: the recovery lane's cursor, as in OutboxClaimExpired
-- (isolate.sql); rows whose lease expired @grace before it were reaped by an
-- earlier pass. The zero time reads from the start.
-- Lock strategy: plain UPDATE; rows locked by a concurrent claim are waited
-- for, and the claim cannot take them (attempts >= max).
-- Index: outbox_leased, from @expired_after - @grace.
-- Rows affected: messages sent to dead now; 0 is the normal case.
-- name: OutboxReap :execrows
UPDATE outbox
   SET status      = 'dead',
       last_error  = 'lease expired after max attempts (worker crash?)',
       lease_owner = NULL,
       lease_until = NULL
 WHERE status = 'processing'
   AND lease_until < now() - @grace::interval
   AND lease_until >= (@expired_after::timestamptz) - (@grace::interval)
   AND attempts >= @max_attempts::integer;
