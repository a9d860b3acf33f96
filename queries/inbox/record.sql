-- The inbox's record of each event received (table inbox, primary key
-- (source, id)). Every query here runs inside the transaction that also runs
-- the consumer's handler, so the record and the handler's writes commit or
-- roll back together.

-- InboxRecord records an event as received and says whether this is its
-- first delivery. @status is what the caller decided for a first delivery:
-- processed (the handler runs in this transaction), parked (kept with its
-- payload until its predecessor is processed) or late (not processed).
-- Lock strategy: INSERT ... ON CONFLICT on the primary key. A concurrent
-- insert of the same key waits for the other transaction: when it commits,
-- this one is a duplicate; when it rolls back, this one inserts. A
-- duplicate only counts the delivery (deliveries + 1) and keeps the rest.
-- Returns inserted = true for a first delivery, false for a duplicate, and
-- the record's status (for a duplicate, what the first delivery became).
-- name: InboxRecord :one
INSERT INTO inbox AS i (source, id, status, event_type, aggregate_id, seq, prev_seq, sent_seq, prior_seq,
                        processed_at, payload, headers, event_time)
VALUES (@source::text, @id::text, @status::text, @event_type::text, sqlc.narg('aggregate_id')::text,
        sqlc.narg('seq')::bigint, sqlc.narg('prev_seq')::bigint, sqlc.narg('sent_seq')::bigint,
        sqlc.narg('prior_seq')::bigint,
        CASE WHEN @status::text = 'parked' THEN NULL ELSE now() END,
        sqlc.narg('payload')::bytea, sqlc.narg('headers')::jsonb, sqlc.narg('event_time')::timestamptz)
ON CONFLICT (source, id) DO UPDATE
   SET deliveries = i.deliveries + 1
RETURNING (i.xmax = 0)::boolean AS inserted, i.status;

-- InboxReceived lists what the inbox holds for one source, keyset-paged by
-- id (pass the last id of the previous page as @after_id, '' for the first):
-- what pgoutbox verify compares with the outbox.
-- Index: the primary key (source, id). Ids are compared as text.
-- 0 rows: nothing more.
-- Lock strategy: none (a read; no row locks).
-- name: InboxReceived :many
SELECT id, status, event_type, aggregate_id, seq, prev_seq, sent_seq, prior_seq, deliveries
  FROM inbox
 WHERE source = @source::text
   AND id > @after_id::text
 ORDER BY id
 LIMIT sqlc.arg('limit')::integer;
