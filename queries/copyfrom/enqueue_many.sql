-- OutboxEnqueueMany bulk-inserts events with COPY (available now).
-- Lock strategy: none. COPY runs no wake-up: run OutboxWake
-- (queries/enqueue.sql) in the same transaction.
-- Headers: COPY has no expressions, so the caller passes a JSON object ({}
-- for none); NULL violates the column's NOT NULL.
-- This query sits in a folder of its own with its own sqlc entry (package
-- dbcopy) because a :copyfrom query adds CopyFrom to the generated DBTX
-- interface: copying queries/ leaves an application's DBTX (and its
-- hand-written mocks) unchanged; copy this folder too only to opt into COPY.
-- Returns the number of rows copied (all or none: COPY fails as a whole).
-- name: OutboxEnqueueMany :copyfrom
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, ordered)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload, @headers, @ordered);
