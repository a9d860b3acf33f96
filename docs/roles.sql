-- Least-privilege roles for pgoutbox.
--
-- Run once per database, after `pgoutbox migrate up`, as the owner of the
-- outbox table (or a superuser). It is idempotent: running it again changes
-- nothing. It creates three NOLOGIN group roles; give your login users
-- membership in one of them (see the end of the file).
--
--   pgoutbox_producer  the application that writes events (Enqueue /
--                      EnqueueMany): INSERT on outbox, and SELECT on the id
--                      column only, because Enqueue's INSERT ... RETURNING id
--                      needs it. Nothing else: it cannot read payloads or
--                      change delivery state. The identity column needs no
--                      sequence grant, and the wake-up needs no grant
--                      (pg_notify and advisory locks are open to every role).
--   pgoutbox_relay     `pgoutbox run` and dispatcher.Run: SELECT and UPDATE
--                      on outbox (claim, fenced finalize, reap, lease
--                      extension, the monitoring gauges), SELECT on the
--                      migration version table (run checks the schema
--                      version at start), SELECT, INSERT and UPDATE on
--                      outbox_attempts (the attempt history the finalize
--                      writes with each failure), and its own row of
--                      outbox_relays (the relays view), SELECT on
--                      outbox_delivered (the deliveries per minute the
--                      console charts). LISTEN needs no grant. It cannot
--                      INSERT or DELETE outbox rows, or change the schema.
--   pgoutbox_admin     operators (`pgoutbox stats`, `dead list/show/retry/
--                      skip`, `redeliver`, `purge`): everything the relay
--                      has, plus DELETE on outbox and outbox_attempts for
--                      purge.
--
-- Schema changes (`pgoutbox migrate up/down`) stay with the table owner.
--
-- Ordered events: the commit-order trigger (migration 00004) runs as the
-- table owner (SECURITY DEFINER), so producers need no UPDATE or sequence
-- grant to get their rows sequenced, and cannot set seq themselves.
-- `pgoutbox stats` reads producers' commit waits from pg_locks, which every
-- role can read. The claim cursor's triggers and function (migration 00005:
-- the txid stamp, the head hand-off, outbox_decide_committed) need no grant
-- either: the stamp only sets a column of the row being updated, the others
-- run as the table owner, and functions are executable by every role.
--
-- PostgreSQL 13 and 14 let every role create tables in schema public
-- (15 made it the owner's alone): there the relay and producers can create
-- objects in public unless you revoke it, as the schema's owner:
--
--   REVOKE CREATE ON SCHEMA public FROM PUBLIC;
--
-- (it affects every role without its own grant on public; this file does not
-- do it for you).
--
-- The grants name the table outbox in the current search_path; if you
-- installed pgoutbox in another schema, qualify the names (myschema.outbox)
-- and grant USAGE on that schema.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgoutbox_producer') THEN
        CREATE ROLE pgoutbox_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgoutbox_relay') THEN
        CREATE ROLE pgoutbox_relay NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgoutbox_admin') THEN
        CREATE ROLE pgoutbox_admin NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO pgoutbox_producer, pgoutbox_relay, pgoutbox_admin;

-- Producers: write events, nothing else.
GRANT INSERT ON outbox TO pgoutbox_producer;
GRANT SELECT (id) ON outbox TO pgoutbox_producer;

-- Relays: claim, finalize, reap; read the schema version.
GRANT SELECT, UPDATE ON outbox TO pgoutbox_relay;
GRANT SELECT ON pgoutbox_migrations TO pgoutbox_relay;
GRANT SELECT, INSERT, UPDATE ON outbox_attempts TO pgoutbox_relay;
-- Each relay records itself (its heartbeat) and forgets long-silent relays.
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relays TO pgoutbox_relay;
-- The deliveries per minute (the console's chart, migration 00018): read
-- only; pgoutbox's statements write them through a function that runs
-- as the table owner.
GRANT SELECT ON outbox_delivered TO pgoutbox_relay;
-- Ordered events committed and not decided yet (migration 00020): read only,
-- by the gauges; the relay decides them through a function that runs as
-- the table owner.
GRANT SELECT ON outbox_sequenced TO pgoutbox_relay;

-- Operators: the relay's rights plus purge.
GRANT pgoutbox_relay TO pgoutbox_admin;
GRANT DELETE ON outbox, outbox_attempts TO pgoutbox_admin;

-- Login users (choose your own names; keep passwords out of shell history,
-- e.g. psql's \password):
--
--   CREATE ROLE orders_app   LOGIN PASSWORD '...' IN ROLE pgoutbox_producer;
--   CREATE ROLE orders_relay LOGIN PASSWORD '...' IN ROLE pgoutbox_relay;
--   CREATE ROLE orders_ops   LOGIN PASSWORD '...' IN ROLE pgoutbox_admin;
--
-- A producer usually also writes business tables in the same transaction:
-- grant those separately.
