-- pgoutbox-migration: 00015_outbox_wake_idle.sql
-- +goose Up
-- Producers notify only while a relay waits idle. Until now every producer
-- transaction ran two PL/pgSQL functions for its wake-up (the WHEN clause's
-- once-per-transaction flag at INSERT and outbox_notify_wake at COMMIT),
-- whether or not a relay was waiting for it: under load, when relays are
-- busy claiming, that was a fifth of the server time of a one-row INSERT.
-- Now the trigger's WHEN clause is two built-in calls and the COMMIT runs
-- nothing unless a relay waits.
--
-- The protocol, in the two-key advisory lock space keyed by the table's oid
-- (applications using two-key advisory locks must avoid the pairs
-- (table oid, 1869968482) to (table oid, 1869968485)):
-- * idle (table oid, 1869968485): a relay that waits for a wake-up holds it
--   exclusively, at session level, on its LISTEN connection
--   (OutboxWakeIdle, queries/wake.sql), and gives it up while it claims
--   back to back (OutboxWakeBusy).
-- * Every inserted row tries to take idle shared for its transaction. When
--   it can, no relay waits: the row queues no wake-up, and the transaction
--   holds idle shared until it ends, so no relay can start waiting before
--   this transaction has committed (a relay takes idle, then claims once
--   more, and sees the row). When it cannot, a relay waits (or is about to:
--   it asked for idle and producers that began before have still to
--   finish): the row queues the wake-up, and the COMMIT notifies.
-- * the notify gate (table oid, 1869968482), as in 00003: at most one
--   notifier at a time; a COMMIT that finds it taken skips its NOTIFY (the
--   relays' wake window covers it).
-- With several relays one holds idle; the others find it held and wait for
-- the same notifications (every LISTEN connection gets each one). A relay
-- that dies releases idle with its connection (one whose network vanished:
-- when the server's keepalives give up, about 30 s); until a relay holds it
-- again, producers skip their NOTIFY and relays find new messages by
-- polling. Relays of an earlier pgoutbox version never take idle: upgrade
-- them with this migration, or they find new messages by polling only
-- (PollInterval). A process of your own that LISTENs on the channel is
-- woken only while a relay waits idle.
-- The two-phase-commit setting (SET LOCAL outbox.wake_queued = on) keeps
-- its meaning: the row queues no wake-up and takes no lock. Rows of a
-- multi-row INSERT or COPY each queue the wake-up while a relay waits; the
-- COMMIT sends one notification (PostgreSQL folds equal ones).
-- outbox_notify_wake and outbox_notify_once (00013) stay, unused.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify_idle() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    -- A relay waits idle: notify, unless a concurrent commit is notifying
    -- right now (the gate). One expression: one step per COMMIT.
    PERFORM CASE WHEN pg_try_advisory_xact_lock(TG_RELID::integer, 1869968482)
                 THEN pg_notify(TG_TABLE_NAME, '') END;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER outbox_notify ON outbox;
CREATE CONSTRAINT TRIGGER outbox_notify
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (current_setting('outbox.wake_queued', true) IS DISTINCT FROM 'on'
          AND NOT pg_try_advisory_xact_lock_shared(new.tableoid::integer, 1869968485))
    EXECUTE FUNCTION outbox_notify_idle();

-- +goose Down
DROP TRIGGER outbox_notify ON outbox;
CREATE CONSTRAINT TRIGGER outbox_notify
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (outbox_notify_once())
    EXECUTE FUNCTION outbox_notify_wake();
DROP FUNCTION outbox_notify_idle();
