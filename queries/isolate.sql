-- Isolation path. A claim that returns payloads fails as a whole when one row
-- cannot be returned (a jsonb whose text form exceeds 1 GB fails with 54000
-- "out of memory" after seconds of CPU; other data or resource errors alike)
-- and it rolls back, so attempts never rise and the row stays first in line
-- for ever. These queries claim without the payload and read each claimed
-- row's payload with its own statement, so one unreadable row can be told
-- apart and sent to dead (OutboxFinalizeMany) while its neighbours flow. The
-- recovery lane uses them too: a recovered message is read the same way.
-- Claims here commit ownership (status 'processing', a lease,
-- lease_version + 1, attempts + 1) exactly as the claims in window.sql do, so
-- every later write is fenced the same way (on lease_owner and
-- lease_version).

-- OutboxIsolateClaim claims up to @batch unordered pending messages without
-- their payload: pending and due rows from the start of the queue,
-- first-come in (txid, id) order (oldest transaction first, insertion
-- order within one; a message made pending again carries the txid of the
-- transaction that did that).
-- Lock strategy: FOR UPDATE SKIP LOCKED, then an UPDATE by primary key
-- through id = ANY(ARRAY(...)).
-- Index: outbox_pending_txid (txid, id), partial: pending unordered rows
-- only, read from its start in key order; rows not yet due are passed over
-- on their table rows.
-- 0 rows: nothing claimable right now (or every candidate is locked by a
-- concurrent claim).
-- name: OutboxIsolateClaim :many
WITH ready AS (
    SELECT id
      FROM outbox
     WHERE status = 'pending'
       AND available_at <= now()
       AND NOT ordered
     ORDER BY txid, id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox AS o
   SET status        = 'processing',
       lease_owner   = @owner::text,
       lease_until   = now() + @lease::interval,
       lease_version = o.lease_version + 1,
       attempts      = o.attempts + 1
 WHERE o.id = ANY (ARRAY(SELECT id FROM ready))
RETURNING o.id, o.lease_version, o.attempts, o.ordered;

-- OutboxIsolateClaimOrdered claims up to @batch ordered heads without their
-- payload: sequenced pending rows with no earlier (seq order: the commit
-- order of the producing transactions) pending, processing or dead row of
-- the same aggregate — the head rule, written as a plain NOT EXISTS: this
-- is the fallback path, taken only after a claim failed, so simplicity beats
-- an index walk. The row must also be flagged head (migration 00005), so
-- that its done hands off to the next. As in OutboxClaimOrderedWindow, no
-- horizon: a row is sequenced only at its transaction's COMMIT, and a lower
-- seq is visible whenever a higher one is. The head is re-checked on the
-- locked row version.
-- Lock strategy: FOR UPDATE SKIP LOCKED on the heads, UPDATE by primary key.
-- Index: outbox_ordered_head (aggregate_id, seq) for the NOT EXISTS probe.
-- Order: by id. 0 rows: no claimable head right now.
-- name: OutboxIsolateClaimOrdered :many
WITH ready AS (
    SELECT o.id
      FROM outbox AS o
     WHERE o.ordered
       AND o.seq IS NOT NULL
       AND o.head
       AND o.status = 'pending'
       AND o.available_at <= now()
       AND NOT EXISTS (
            SELECT 1
              FROM outbox AS p
             WHERE p.ordered
               AND p.seq IS NOT NULL
               AND p.aggregate_id = o.aggregate_id
               AND p.status IN ('pending', 'processing', 'dead')
               AND p.seq < o.seq)
     ORDER BY o.id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox AS o
   SET status        = 'processing',
       lease_owner   = @owner::text,
       lease_until   = now() + @lease::interval,
       lease_version = o.lease_version + 1,
       attempts      = o.attempts + 1
 WHERE o.id = ANY (ARRAY(SELECT id FROM ready))
RETURNING o.id, o.lease_version, o.attempts, o.ordered;

-- OutboxClaimExpired is the recovery lane's claim: the one message whose
-- lease expired longest ago with attempts left (a crashed or frozen owner's),
-- without its payload. The lane publishes it alone, apart from the main
-- pipeline, which never recovers expired leases itself. An expired ordered
-- row is always its aggregate's head (nothing after it was claimable while
-- it was processing), so recovering it keeps the order.
-- @unordered / @ordered select the kinds this dispatcher claims.
-- @expired_after is the caller's cursor: every lease that expired before it
-- was recovered by an earlier pass (the zero time: none, read from the
-- start). outbox_leased keeps an entry for every claim made while a long
-- snapshot is held (the row is done, the entry dead but not removable), at
-- the claim's lease_until; read from the start, the index's expired part is
-- every claim of the hold older than one lease, visited in the heap on every
-- pass (measured: 2 buffers per pass before, 1,769 one minute into a held
-- snapshot at 2,000 events/s, growing by about 30 a second). From the
-- cursor a pass reads only the leases that expired since the previous pass.
-- The dispatcher moves it to the previous pass's database time minus a
-- margin (a claim statement still running then can commit a lease_until a
-- little before it) and reads from the start once per SweepInterval, for
-- rows a concurrent transaction held (SKIP LOCKED) and then rolled back.
-- Lock strategy: FOR UPDATE SKIP LOCKED; UPDATE by primary key.
-- Index: outbox_leased (lease_until, partial: processing), from @expired_after.
-- 0 rows: no expired lease to recover.
-- name: OutboxClaimExpired :many
WITH expired AS (
    SELECT id
      FROM outbox
     WHERE status = 'processing'
       AND lease_until < now()
       AND lease_until >= @expired_after::timestamptz
       AND attempts < @max_attempts::integer
       AND ((ordered AND @ordered::boolean) OR (NOT ordered AND @unordered::boolean))
     ORDER BY lease_until
     LIMIT 1
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox AS o
   SET status        = 'processing',
       lease_owner   = @owner::text,
       lease_until   = now() + @lease::interval,
       lease_version = o.lease_version + 1,
       attempts      = o.attempts + 1
 WHERE o.id = ANY (ARRAY(SELECT id FROM expired))
RETURNING o.id, o.lease_version, o.attempts, o.ordered;

-- OutboxIsolateRead reads one claimed message in full, fenced: only while the
-- caller still holds the lease it claimed (lease_owner and lease_version, the
-- token of finalize.sql). A data or resource error here
-- (SQLSTATE class 22, 54, 53200) belongs to this row alone: the caller sends
-- it to dead with OutboxFinalizeMany, naming the SQLSTATE. An ordered row comes
-- with its position (seq, prev_seq, sent_seq; 0 for none), as the claims
-- return it.
-- Lock strategy: none (a plain read by primary key).
-- No row (pgx.ErrNoRows): lease lost.
-- name: OutboxIsolateRead :one
SELECT id, aggregate_type, aggregate_id, event_type, payload, headers, created_at,
       coalesce(seq, 0)::bigint AS seq, coalesce(prev_seq, 0)::bigint AS prev_seq,
       coalesce(sent_seq, 0)::bigint AS sent_seq
  FROM outbox
 WHERE id = @id::bigint
   AND status = 'processing'
   AND lease_version = @lease_version::bigint
   AND lease_owner = @lease_owner::text;
