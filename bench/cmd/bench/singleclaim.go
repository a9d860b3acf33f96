package main

// singleClaimSQL is the single-statement claim of earlier releases
// (OutboxClaim), the simple claim pgoutbox grew from: an expired lease
// alone, else pending unordered rows
// from the start of the queue in (txid, id) order, FOR UPDATE SKIP LOCKED,
// then lease_version + 1 and attempts + 1 in one UPDATE. The relay runs
// OutboxClaimWindow instead (a cursor, lanes); the claim-only SQL ceiling
// keeps this statement as it was first measured, so its figures stay
// comparable across releases.
const singleClaimSQL = `WITH expired AS (
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
SELECT c.id, c.lease_version, c.attempts, c.aggregate_type, c.aggregate_id,
       c.event_type, c.payload, c.headers, c.created_at,
       EXISTS (SELECT 1 FROM expired)::boolean AS recovered
  FROM claimed AS c
 ORDER BY c.txid, c.id`
