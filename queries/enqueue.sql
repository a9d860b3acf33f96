-- Queries producers run inside their business transaction: the row commits or
-- rolls back together with the business change, which is the point of an outbox.

-- OutboxEnqueue inserts one event and returns its id (the idempotency key
-- every publisher passes downstream).
-- Lock strategy: none beyond the insert; the statement trigger outbox_notify
-- wakes idle dispatchers at COMMIT.
-- available_at: NULL means now() of the database (deliver as soon as possible).
-- headers: NULL or empty bytes store {} (the column is NOT NULL jsonb); the
-- bytea cast keeps the Go type []byte and lets an empty json.RawMessage
-- through to nullif instead of failing as invalid json.
-- name: OutboxEnqueue :one
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, ordered, available_at)
VALUES (
    @aggregate_type::text,
    @aggregate_id::text,
    @event_type::text,
    @payload::jsonb,
    coalesce(convert_from(nullif(sqlc.narg('headers')::bytea, ''::bytea), 'UTF8')::jsonb, '{}'::jsonb),
    @ordered::boolean,
    coalesce(sqlc.narg('available_at')::timestamptz, now())
)
RETURNING id;


-- The COPY form, OutboxEnqueueMany, is in copyfrom/enqueue_many.sql with an
-- sqlc entry of its own (package dbcopy): a :copyfrom query adds CopyFrom to
-- the generated DBTX interface.
