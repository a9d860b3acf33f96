-- Retention of inbox records. A record must outlive every redelivery of its
-- event: keep records at least as long as the longest time between two
-- deliveries of one event to this consumer (the outbox re-publishing it
-- after a takeover or a retry, the broker redelivering an unacknowledged
-- message, a replay from an older offset), which sizes @older_than.

-- InboxPurge deletes at most @max_rows finished records (processed or late)
-- that finished before now() - @older_than (database clock), oldest first.
-- Bounded so each call is a short transaction; call it until it returns 0.
-- Parked records are never deleted.
-- Access path: inbox_finished (processed_at, partial on finished rows) for
-- the candidates, then one TID lookup each; status is re-checked on the row
-- version deleted (a duplicate delivery that updated the row meanwhile
-- leaves it for the next call).
-- Rows affected: rows deleted; 0 = nothing left to purge.
-- Lock strategy: DELETE by TID of the rows chosen; a row locked by a
-- concurrent writer is waited for.
-- name: InboxPurge :execrows
DELETE FROM inbox
 WHERE ctid = ANY (ARRAY(
        SELECT f.ctid
          FROM inbox AS f
         WHERE f.status <> 'parked'
           AND f.processed_at < now() - @older_than::interval
         ORDER BY f.processed_at
         LIMIT @max_rows::integer))
   AND status <> 'parked';

-- InboxPurgeGaps deletes at most @max_rows gap records detected before
-- now() - @older_than, oldest first (kept as long as the records, so that a
-- late arrival is still recognized as one).
-- Access path: inbox_gaps_detected, then one TID lookup each.
-- Rows affected: rows deleted; 0 = nothing left to purge.
-- Lock strategy: DELETE by TID of the rows chosen.
-- name: InboxPurgeGaps :execrows
DELETE FROM inbox_gaps
 WHERE ctid = ANY (ARRAY(
        SELECT g.ctid
          FROM inbox_gaps AS g
         WHERE g.detected_at < now() - @older_than::interval
         ORDER BY g.detected_at
         LIMIT @max_rows::integer));
