-- Operator queries: the dead list, redrive, skip, retention.

-- OutboxListDead lists dead messages keyset-paged by id (pass the last id of
-- the previous page as @after_id, 0 for the first), optionally filtered.
-- Index: outbox_dead.
-- Lock strategy: none (a read; no row locks).
-- No rows: no dead message after @after_id (that matches the filters).
-- name: OutboxListDead :many
SELECT id, aggregate_type, aggregate_id, event_type, attempts, last_error, created_at, ordered
  FROM outbox
 WHERE status = 'dead'
   AND id > @after_id::bigint
   AND (sqlc.narg('event_type')::text IS NULL OR event_type = sqlc.narg('event_type')::text)
   AND (sqlc.narg('aggregate_type')::text IS NULL OR aggregate_type = sqlc.narg('aggregate_type')::text)
   AND (sqlc.narg('aggregate_id')::text IS NULL OR aggregate_id = sqlc.narg('aggregate_id')::text)
 ORDER BY id
 LIMIT sqlc.arg('limit')::integer;

-- OutboxRedriveDead gives a dead message a fresh start: pending, attempts 0,
-- available now. last_error keeps the history. Nothing here wakes
-- dispatchers: callers NOTIFY (OutboxNotify).
-- 0 rows: no such id, or it is not dead (nothing changed).
-- Lock strategy: a single-row UPDATE by primary key, guarded by status = 'dead'.
-- name: OutboxRedriveDead :execrows
UPDATE outbox
   SET status       = 'pending',
       attempts     = 0,
       available_at = now(),
       done_at      = NULL
 WHERE id = @id::bigint
   AND status = 'dead';

-- OutboxSkipDead resolves a dead message without delivering it: dead ->
-- skipped (done_at: when), which unblocks an ordered aggregate as delivery
-- does but never counts as delivered. last_error keeps why it died,
-- prefixed with the operator's reason.
-- 0 rows: no such id, or it is not dead (nothing changed).
-- Lock strategy: a single-row UPDATE by primary key, guarded by status = 'dead';
-- skipping an ordered head hands its aggregate on (the trigger
-- outbox_head_handoff) under the aggregate's advisory lock: a caller that
-- skips several in one transaction takes their locks first, in key order,
-- with OutboxLockAggregatesOfIds.
-- name: OutboxSkipDead :execrows
UPDATE outbox
   SET status     = 'skipped',
       done_at    = now(),
       last_error = left('skipped: ' || coalesce(sqlc.narg('reason')::text, 'no reason given')
                         || ' | ' || coalesce(last_error, ''), 500)
 WHERE id = @id::bigint
   AND status = 'dead';

-- OutboxLockAggregatesOfIds takes the advisory locks of the aggregates of
-- the ordered rows among @ids, all at once and in key order
-- (outbox_lock_aggregates, migration 00008: the order producers' COMMITs
-- take them in). A transaction that then makes several ordered heads done
-- one statement at a time (OutboxSkipDead per id) already holds every lock
-- their hand-offs take, so it never waits for a producer while holding a
-- lock that producer needs: no "deadlock detected" for either.
-- Lock strategy: pg_advisory_xact_lock per aggregate, in key order, held to
-- the end of the transaction. Index: the primary key.
-- Returns the number of locks taken.
-- name: OutboxLockAggregatesOfIds :one
SELECT outbox_lock_aggregates(ARRAY(
        SELECT o.aggregate_id
          FROM outbox AS o
         WHERE o.id = ANY (@ids::bigint[])
           AND o.ordered))::integer AS locked;

-- OutboxPurgeDone deletes at most @limit done rows older than @older_than
-- (done_at, database clock), oldest first. Bounded so each call is a short
-- transaction; call it until it returns 0.
-- Access path: outbox_finished (its done part) in done_at order for the candidates,
-- then the primary key through id = ANY(ARRAY(...)). Written as
-- id IN (SELECT ...), the delete was planned as a hash semi join over a
-- sequential scan of the whole table whenever the plan was generic (the CLI's
-- default pgx statement cache) and, at batch 10,000, even as a custom plan:
-- each batch cost O(table) instead of O(batch) (measured on 300,000 done
-- rows: 247 ms per batch of 1,000 generic, 416 ms per batch of 10,000,
-- against 2.1 ms and 99 ms this way).
-- The candidates' attempt history (outbox_attempts, migration 00011) goes
-- in the same statement (a primary-key probe per candidate; a candidate
-- redelivered between the candidate scan and its delete keeps its row but
-- loses its history).
-- Deleted rows done within the last two hours leave their minutes'
-- deliveries (outbox_delivered_add, migration 00018) in the same statement.
-- Lock strategy: plain DELETE by primary key; status is re-checked on the
-- row version deleted. Returns the rows deleted; 0 = nothing left to purge.
-- name: OutboxPurgeDone :one
WITH candidates AS (
    SELECT ARRAY(
            SELECT p.id
              FROM outbox AS p
             WHERE p.status = 'done'
               AND p.done_at < now() - @older_than::interval
             ORDER BY p.done_at
             LIMIT sqlc.arg('limit')::integer) AS ids
),
history AS (
    DELETE FROM outbox_attempts
     WHERE message_id = ANY ((SELECT c.ids FROM candidates AS c)::bigint[])
),
gone AS (
    DELETE FROM outbox
     WHERE id = ANY ((SELECT c.ids FROM candidates AS c)::bigint[])
       AND status = 'done'
    RETURNING done_at
),
counted AS (
    SELECT outbox_delivered_add(coalesce(array_agg(g.minute), '{}'), coalesce(array_agg(-g.n), '{}')) AS added
      FROM (SELECT date_trunc('minute', gone.done_at) AS minute, count(*) AS n
              FROM gone
             WHERE gone.done_at >= date_trunc('minute', now()) - interval '2 hours'
             GROUP BY 1) AS g
)
SELECT (SELECT count(*) FROM gone)::bigint AS deleted
  FROM counted;

-- OutboxPurgeResolved deletes at most @limit messages whose status is in
-- @statuses (the CLI passes 'dead' and 'skipped', never 'done': done rows
-- go through OutboxPurgeDone) and whose age is past @older_than: done_at
-- (for a skipped message, when it was skipped), else the time of its last
-- attempt-history entry (for a dead message, when it died), else its
-- created_at; database clock. Keyset-paged by id: pass the highest id returned as @after_id
-- (0 first), until no row comes back, so rows too young to go are read
-- once per run, not once per batch. Their attempt history goes with them.
-- Access path: outbox_dead for dead rows (a sequential scan for other
-- statuses: keep them few, or purge them often); the history by its
-- primary key. Lock strategy: plain DELETE by primary key, the status
-- re-checked on the row version deleted.
-- Returns the ids deleted, ascending; none: nothing left to purge.
-- name: OutboxPurgeResolved :many
WITH gone AS (
    DELETE FROM outbox AS o
     WHERE o.id = ANY (ARRAY(
            SELECT p.id
              FROM outbox AS p
             WHERE p.status = ANY (@statuses::text[])
               AND p.status NOT IN ('pending', 'processing', 'done')
               AND p.id > @after_id::bigint
               AND coalesce(p.done_at,
                            (SELECT max(h.at) FROM outbox_attempts AS h WHERE h.message_id = p.id),
                            p.created_at) < now() - @older_than::interval
             ORDER BY p.id
             LIMIT sqlc.arg('limit')::integer))
       AND o.status = ANY (@statuses::text[])
       AND o.status NOT IN ('pending', 'processing', 'done')
    RETURNING o.id
),
history AS (
    DELETE FROM outbox_attempts
     WHERE message_id = ANY (ARRAY(SELECT g.id FROM gone AS g))
)
SELECT g.id FROM gone AS g ORDER BY g.id;
