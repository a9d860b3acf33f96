-- The attempt history (outbox_attempts, migration 00011) and what operators
-- do with it: read a message's timeline, deliver a delivered message again.
-- The relay writes the history itself, in OutboxFinalizeMany.

-- OutboxAttemptHistory reads a message's history, newest first: the failed
-- publishes of its last 20 claims and its last 5 operator actions (the
-- rings of migration 00011). n is the claim (lease_version) each belongs
-- to, numbered over the message's whole life whatever outbox.attempts says
-- after a redrive. Index: the primary key (message_id, slot).
-- No rows: the message never failed (or is gone).
-- Lock strategy: none (a read; no row locks).
-- name: OutboxAttemptHistory :many
SELECT n, at, kind, attempt, actor, error, answer
  FROM outbox_attempts
 WHERE message_id = @message_id::bigint
 ORDER BY n DESC, at DESC;

-- OutboxRedeliverDone delivers done messages again: back to pending,
-- available now, attempts 0 (the delivery gets its full budget of
-- attempts; the history keeps the count), done_at cleared. The message
-- keeps its id, so its idempotency key (Idempotency-Key, the CloudEvents
-- id, the broker's message id) is the one the consumer saw: a consumer that
-- kept its copy deduplicates it. Each redelivered message gets a history
-- entry 'redeliver' with @actor (who asked) in the same statement, n its
-- lease_version (the claim that delivered it), in the operators' ring
-- (slots 20 to 24: the free one, else the oldest).
-- Ordered messages are refused: a done ordered message was handed on to
-- the next event of its aggregate, which may have been delivered since;
-- sending it again now would deliver it after later events, and putting it
-- back in its aggregate's order would block the events behind it.
-- Callers NOTIFY (OutboxNotify) afterwards to wake dispatchers; the
-- claim's due lane finds the rows (available_at after created_at).
-- Lock strategy: one UPDATE by primary key over the id array, guarded by
-- status = 'done' and NOT ordered (re-checked on the row version updated).
-- Returns one row per distinct requested id, ascending, with what became
-- of it: 'redelivered', 'ordered' (refused), 'missing' (no such id: never
-- existed or purged), or the status that made it ineligible ('pending',
-- 'processing', 'dead', ...: not delivered, nothing changed).
-- name: OutboxRedeliverDone :many
WITH old AS (
    -- Locked, so done_at is the row's latest (its delivery leaves that
    -- minute's count).
    SELECT p.id, p.attempts, p.lease_version, p.done_at
      FROM outbox AS p
     WHERE p.id = ANY (@ids::bigint[])
       AND p.status = 'done'
       AND NOT p.ordered
       FOR UPDATE
),
changed AS (
    UPDATE outbox AS o
       SET status       = 'pending',
           attempts     = 0,
           available_at = now(),
           done_at      = NULL
      FROM old
     WHERE o.id = old.id
       AND o.status = 'done'
       AND NOT o.ordered
    RETURNING o.id, old.attempts, old.lease_version, old.done_at
),
counted AS (
    -- Each redelivered message leaves its delivery's minute in the
    -- deliveries per minute (outbox_delivered_add, migration 00018).
    SELECT outbox_delivered_add(coalesce(array_agg(g.minute), '{}'), coalesce(array_agg(-g.n), '{}'))
      FROM (SELECT date_trunc('minute', c.done_at) AS minute, count(*) AS n
              FROM changed AS c
             GROUP BY 1) AS g
),
history AS (
    INSERT INTO outbox_attempts AS h (message_id, slot, n, at, kind, attempt, actor)
    SELECT c.id, p.slot, c.lease_version::integer, now(), 'redeliver', c.attempts, @actor::text
      FROM changed AS c
     CROSS JOIN LATERAL (SELECT s.slot
                           FROM generate_series(20, 24) AS s (slot)
                           LEFT JOIN outbox_attempts AS a ON a.message_id = c.id AND a.slot = s.slot
                          ORDER BY a.at NULLS FIRST, s.slot
                          LIMIT 1) AS p
    ON CONFLICT (message_id, slot) DO UPDATE
       SET n = excluded.n, at = excluded.at, kind = excluded.kind, attempt = excluded.attempt,
           actor = excluded.actor, error = NULL, answer = NULL
)
SELECT r.id::bigint AS id,
       (CASE WHEN c.id IS NOT NULL THEN 'redelivered'
             WHEN o.id IS NULL THEN 'missing'
             WHEN o.status = 'done' AND o.ordered THEN 'ordered'
             ELSE o.status END)::text AS result
  FROM (SELECT DISTINCT unnest(@ids::bigint[]) AS id) AS r
  LEFT JOIN changed AS c ON c.id = r.id
  LEFT JOIN outbox AS o ON o.id = r.id
 WHERE (SELECT count(*) FROM counted) >= 0
 ORDER BY r.id;
