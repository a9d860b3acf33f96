-- The relay's side of the producers' wake-up (migration 00015). A
-- producer's transaction queues a NOTIFY only while a relay holds the idle
-- lock; a relay holds it while it waits for a wake-up (and in its wake
-- window), and gives it up while it claims back to back. All of these run
-- on the relay's LISTEN connection (session-level locks belong to the
-- connection: never through a pooler in transaction mode), in autocommit.

-- OutboxWakeIdle says "this relay waits": it tries to take the idle lock
-- exclusively, at session level, without waiting, and reports whether
-- another session holds it so (another relay waits: producers notify
-- already).
-- Lock strategy: pg_try_advisory_lock on (table oid, 1869968485); reads
-- pg_locks only when it is not taken.
-- held false: not taken; with other_relay false, producers' transactions
-- that began while no relay waited are still open (each holds the lock
-- shared until it ends): call OutboxWakeAwaitIdle, or try again later.
-- Always one row.
-- name: OutboxWakeIdle :one
SELECT held,
       (NOT held AND EXISTS (
           SELECT FROM pg_catalog.pg_locks AS l
            WHERE l.locktype = 'advisory'
              AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
              AND l.classid = ('outbox'::regclass)::oid AND l.objid = 1869968485 AND l.objsubid = 2
              AND l.mode = 'ExclusiveLock' AND l.granted AND l.pid <> pg_backend_pid()))::boolean AS other_relay
  FROM (SELECT pg_try_advisory_lock(('outbox'::regclass)::oid::integer, 1869968485) AS held) AS t;

-- OutboxWakeAwaitIdle takes the idle lock exclusively, waiting until every
-- producer transaction that holds it shared (it began while no relay
-- waited, so it will not notify) has ended. While it waits, producers that
-- insert notify instead. A claim after it sees every row of those
-- transactions.
-- Lock strategy: pg_advisory_lock on (table oid, 1869968485), session
-- level; it waits as long as the session's lock_timeout allows (a
-- long producer transaction, a prepared one until COMMIT PREPARED, or
-- another relay waiting idle).
-- Always one row (discarded); an error when lock_timeout runs out.
-- name: OutboxWakeAwaitIdle :exec
SELECT pg_advisory_lock(('outbox'::regclass)::oid::integer, 1869968485);

-- OutboxWakeBusy gives the idle lock up: this relay claims back to back, so
-- producers need not wake it.
-- Lock strategy: releases the session's exclusive hold of (table oid,
-- 1869968485).
-- false: the session did not hold it (PostgreSQL also logs a warning).
-- Always one row.
-- Index: none (no table read).
-- name: OutboxWakeBusy :one
SELECT pg_advisory_unlock(('outbox'::regclass)::oid::integer, 1869968485) AS released;

-- OutboxWakeSession prepares the LISTEN connection for the locks above: a
-- lock_timeout that bounds OutboxWakeAwaitIdle's wait (session-level; the
-- connection runs nothing else that locks), and server-side TCP keepalives
-- (10 s idle, then every 5 s, 3 probes; 30 s for unacknowledged data), so
-- that the idle lock of a relay whose network vanished without a reset is
-- released within about half a minute instead of the operating system's
-- two hours: until then producers notify for it, and no other relay can
-- take the lock. (Ignored on Unix-domain sockets and where the platform
-- lacks them.)
-- Lock strategy: none. Always one row.
-- Index: none (no table read).
-- name: OutboxWakeSession :exec
SELECT set_config('lock_timeout', @lock_timeout::text, false),
       set_config('tcp_keepalives_idle', '10', false),
       set_config('tcp_keepalives_interval', '5', false),
       set_config('tcp_keepalives_count', '3', false),
       set_config('tcp_user_timeout', '30000', false);

-- OutboxNotify wakes idle dispatchers (the channel OutboxEnqueue notifies on).
-- Delivered at COMMIT when run inside a transaction.
-- Lock strategy: none (pg_notify queues the notification; PostgreSQL takes
-- its notify lock at COMMIT). Always one row (discarded).
-- Index: none (no table read).
-- name: OutboxNotify :exec
SELECT pg_notify('outbox', '');
