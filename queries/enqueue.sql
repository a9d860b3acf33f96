-- Queries producers run inside their business transaction: the row commits or
-- rolls back together with the business change, which is the point of an outbox.

-- OutboxEnqueue inserts one event and returns its id (the idempotency key
-- every publisher passes downstream).
-- Lock strategy: none beyond the insert; the statement trigger outbox_notify
-- wakes idle dispatchers at COMMIT.
-- available_at: NULL means now() of the database (deliver as soon as possible).
-- name: OutboxEnqueue :one
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, ordered, available_at)
VALUES (
    @aggregate_type::text,
    @aggregate_id::text,
    @event_type::text,
    @payload::jsonb,
    @headers::jsonb,
    @ordered::boolean,
    coalesce(sqlc.narg('available_at')::timestamptz, now())
)
RETURNING id;

-- OutboxEnqueueMany bulk-inserts events with COPY (available now).
-- Lock strategy: none; one NOTIFY per COPY through the statement trigger.
-- name: OutboxEnqueueMany :copyfrom
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, ordered)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload, @headers, @ordered);
