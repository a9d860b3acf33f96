-- Queries producers run inside their business transaction: the row commits or
-- rolls back together with the business change, which is the point of an outbox.
--
-- The wake-up: a relay that waits for new messages holds the idle lock
-- (table oid, 1869968485) at session level (queries/wake.sql). A producer's
-- statement tries to take it shared for its transaction. When it can, no
-- relay waits, and none can start waiting before this transaction ends (a
-- relay that asks for the lock waits for it, then claims once more and sees
-- the rows). When it cannot, a relay waits: the statement queues a NOTIFY on
-- the channel named after the table, which PostgreSQL sends at COMMIT and
-- drops on rollback. SET LOCAL outbox.wake_queued = on skips both (a
-- transaction that NOTIFYs cannot PREPARE TRANSACTION). Rows inserted
-- without a wake-up are claimed at the relays' next poll (PollInterval).

-- OutboxEnqueue inserts one event, wakes an idle relay (see above), and
-- returns the event's id (the idempotency key every publisher passes
-- downstream).
-- Lock strategy: none beyond the insert and, unless
-- outbox.wake_queued = on, the idle lock shared until the transaction ends
-- (never waits). Always one row: the WHERE clause is true whichever way the
-- wake-up goes (EXISTS over pg_notify's one row), and stops at the first
-- true term.
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
    OR EXISTS (SELECT FROM pg_notify('outbox', ''))
RETURNING id;

-- OutboxWake wakes an idle relay for rows this transaction inserted some
-- other way: after OutboxEnqueueMany (COPY), or after an INSERT of your own.
-- Run it once per transaction, at any point before COMMIT.
-- Lock strategy: as OutboxEnqueue's wake-up: unless outbox.wake_queued = on,
-- the idle lock shared until the transaction ends (never waits).
-- Always one row (true).
-- name: OutboxWake :exec
SELECT current_setting('outbox.wake_queued', true) IS NOT DISTINCT FROM 'on'
    OR pg_try_advisory_xact_lock_shared(('outbox'::regclass)::oid::integer, 1869968485)
    OR EXISTS (SELECT FROM pg_notify('outbox', '')) AS wake;

-- The COPY form, OutboxEnqueueMany, is in copyfrom/enqueue_many.sql with an
-- sqlc entry of its own (package dbcopy): a :copyfrom query adds CopyFrom to
-- the generated DBTX interface.
