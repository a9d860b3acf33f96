-- The relay's side of the producers' wake-up (migration 00013). A
-- producer's COMMIT skips its NOTIFY while a relay holds the busy lock; a
-- relay holds it while it claims without waiting for a wake-up, and gives
-- it up before it waits. All three run on the relay's LISTEN connection
-- (session-level locks belong to the connection: never through a pooler in
-- transaction mode), in autocommit.

-- OutboxWakeBusy says "this relay is busy": it tries to take the busy lock
-- shared, at session level, without waiting. Relays share it; a producer's
-- COMMIT that finds it held skips its NOTIFY.
-- Lock strategy: pg_try_advisory_lock_shared on (table oid, 1869968483).
-- false: not taken (a producer's COMMIT was checking it at this instant);
-- producers keep notifying, and the caller tries again later.
-- name: OutboxWakeBusy :one
SELECT pg_try_advisory_lock_shared(('outbox'::regclass)::oid::integer, 1869968483) AS busy;

-- OutboxWakeIdle gives the busy lock up. Call OutboxWakeBarrier next, then
-- claim once more before waiting for a notification.
-- Lock strategy: releases the session's shared hold of (table oid,
-- 1869968483).
-- false: the session did not hold it (PostgreSQL also logs a warning).
-- name: OutboxWakeIdle :one
SELECT pg_advisory_unlock_shared(('outbox'::regclass)::oid::integer, 1869968483) AS released;

-- OutboxWakeBarrier waits until every producer COMMIT that may have skipped
-- its NOTIFY has finished: each holds the in-flight lock shared until its
-- COMMIT is visible, and this statement takes it exclusively for an instant
-- (autocommit: released when the statement ends). Producers that commit
-- while it waits notify instead. A claim after it sees every commit that
-- skipped its NOTIFY.
-- Lock strategy: pg_advisory_xact_lock on (table oid, 1869968484); it waits
-- as long as the session's lock_timeout allows (a producer under SET
-- CONSTRAINTS ALL IMMEDIATE holds the in-flight lock from its INSERT, a
-- prepared transaction until COMMIT PREPARED).
-- name: OutboxWakeBarrier :exec
SELECT pg_advisory_xact_lock(('outbox'::regclass)::oid::integer, 1869968484);

-- OutboxWakeSession prepares the LISTEN connection for the locks above: a
-- lock_timeout that bounds OutboxWakeBarrier's wait (session-level; the
-- connection runs nothing else that locks), and server-side TCP keepalives
-- (10 s idle, then every 5 s, 3 probes; 30 s for unacknowledged data), so
-- that the busy lock of a relay whose network vanished without a reset is
-- released within about half a minute instead of the operating system's
-- two hours: until then producers skip their NOTIFY and the other relays
-- find new messages by polling. (Ignored on Unix-domain sockets and where
-- the platform lacks them.)
-- Lock strategy: none. Always one row.
-- name: OutboxWakeSession :exec
SELECT set_config('lock_timeout', @lock_timeout::text, false),
       set_config('tcp_keepalives_idle', '10', false),
       set_config('tcp_keepalives_interval', '5', false),
       set_config('tcp_keepalives_count', '3', false),
       set_config('tcp_user_timeout', '30000', false);
