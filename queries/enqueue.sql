-- Queries producers run inside their business transaction: the row commits or
-- rolls back together with the business change, which is the point of an outbox.
--
-- The wake-up: a relay that waits for new messages holds the idle lock
-- (table oid, 1869968485) at session level (queries/wake.sql). A producer's
-- statement tries to take it shared for its transaction. When it can, no
-- relay waits, and none can start waiting before this transaction ends (a
-- relay that asks for the lock waits for it, then claims once more and sees
-- the rows). When it cannot, a relay waits, and one producer transaction at
-- a time notifies: the statement tries to take the notify gate (table oid,
-- 1869968482) for its transaction; with it, it queues a NOTIFY on the
-- channel named after the table, which PostgreSQL sends at COMMIT and drops
-- on rollback; without it (another transaction holds the gate and notifies
-- when it ends), it queues nothing. PostgreSQL commits notifying
-- transactions one at a time (its notify lock is held through the commit's
-- WAL flush), so without the gate every producer's COMMIT would queue behind
-- the others' while a relay waits. Rows committed without a notification of
-- their own are found by the relay's wake window after the gate holder's,
-- or at its next poll (PollInterval) when the holder rolls back or stays
-- open long. SET LOCAL outbox.wake_queued = on skips all of it (a
-- transaction that NOTIFYs cannot PREPARE TRANSACTION).

-- OutboxEnqueue inserts one event, wakes an idle relay (see above), and
-- returns the event's id (the idempotency key every publisher passes
-- downstream).
-- Lock strategy: none beyond the insert and, unless
-- outbox.wake_queued = on, the idle lock shared or, while a relay waits, the
-- notify gate, each until the transaction ends (never waits). Always one
-- row: the WHERE clause is true whichever way the wake-up goes (EXISTS over
-- pg_notify's one row), and stops at the first true term.
-- available_at: NULL means now() of the database (deliver as soon as possible).
-- headers: NULL or empty bytes store {} (the column is NOT NULL jsonb); the
-- bytea cast keeps the Go type []byte and lets an empty json.RawMessage
-- through to nullif instead of failing as invalid json.
-- name: OutboxEnqueue :one
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, ordered, available_at)
SELECT @aggregate_type::text,
       @aggregate_id::text,
       @event_type::text,
       @payload::jsonb,
       coalesce(convert_from(nullif(sqlc.narg('headers')::bytea, ''::bytea), 'UTF8')::jsonb, '{}'::jsonb),
       @ordered::boolean,
       coalesce(sqlc.narg('available_at')::timestamptz, now())
 WHERE current_setting('outbox.wake_queued', true) IS NOT DISTINCT FROM 'on'
    OR pg_try_advisory_xact_lock_shared(('outbox'::regclass)::oid::integer, 1869968485)
    OR NOT pg_try_advisory_xact_lock(('outbox'::regclass)::oid::integer, 1869968482)
    OR EXISTS (SELECT FROM pg_notify('outbox', ''))
RETURNING id;

-- OutboxWake wakes an idle relay for rows this transaction inserted some
-- other way: after OutboxEnqueueMany (COPY), or after an INSERT of your own.
-- Run it once per transaction, after the rows, outside any savepoint you
-- may roll back (a rolled-back savepoint takes its locks and its NOTIFY
-- with it). The table is found through the search_path, as in every query
-- here.
-- Lock strategy: as OutboxEnqueue's wake-up: unless outbox.wake_queued = on,
-- the idle lock shared or the notify gate until the transaction ends (never
-- waits). Always one row (true).
-- name: OutboxWake :exec
SELECT current_setting('outbox.wake_queued', true) IS NOT DISTINCT FROM 'on'
    OR pg_try_advisory_xact_lock_shared(('outbox'::regclass)::oid::integer, 1869968485)
    OR NOT pg_try_advisory_xact_lock(('outbox'::regclass)::oid::integer, 1869968482)
    OR EXISTS (SELECT FROM pg_notify('outbox', '')) AS wake;

-- The COPY form, OutboxEnqueueMany, is in copyfrom/enqueue_many.sql with an
-- sqlc entry of its own (package dbcopy): a :copyfrom query adds CopyFrom to
-- the generated DBTX interface.
