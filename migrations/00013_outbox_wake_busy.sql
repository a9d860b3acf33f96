-- pgoutbox-migration: 00013_outbox_wake_busy.sql
-- +goose Up
-- No NOTIFY while a relay is busy. A relay that is claiming anyway (its last
-- claims found messages and it claims again as soon as it has room) need not
-- be woken, yet every producer's COMMIT still paid for a notification: a
-- NOTIFY takes one lock per database at COMMIT and holds it until the
-- commit record is flushed, so notifying commits cannot share a flush. With
-- this trigger function a producer's COMMIT skips its NOTIFY while a relay
-- says it is busy; it notifies as before (at most one notifier at a time,
-- 00003) whenever no relay says so.
--
-- The protocol, three advisory locks in the two-key space keyed by the
-- table's oid (applications using two-key advisory locks must avoid these
-- pairs):
-- * busy (table oid, 1869968483): a busy relay holds it shared, at session
--   level, on its LISTEN connection (OutboxWakeBusy, queries/wake.sql).
-- * in flight (table oid, 1869968484): every committing producer holds it
--   shared until its COMMIT has finished, taken before it looks at busy.
-- * the notify gate (table oid, 1869968482), as in 00003.
-- A producer's COMMIT takes in flight, then tries busy exclusively for an
-- instant (taken and released at once): when it cannot, a relay holds busy
-- and the NOTIFY is skipped. A relay that stops being busy releases busy,
-- then takes in flight exclusively once (OutboxWakeBarrier), which waits
-- until every COMMIT that skipped its NOTIFY has finished, and claims once
-- more before it waits for a notification: no committed message is left
-- waiting for a poll. A producer that cannot take in flight (a relay is in
-- that barrier) notifies. A producer that finds busy taken by another
-- producer's instant check skips too; that producer is committing at the
-- same moment and notifies, as with the gate (the relays' wake window covers
-- it). A relay that dies while busy releases busy with its connection (one
-- whose network vanished: when the server's keepalives give up, about 30 s
-- with the settings relays give that connection); the other relays, and
-- its own restart, claim what was committed meanwhile (every relay polls).
-- Relays of an earlier pgoutbox version never take busy: producers notify
-- them as before. A process of your own that LISTENs on the channel is not
-- woken while a relay is busy.
-- Cost when no relay is busy: two more lock-table operations per COMMIT;
-- when one is: no NOTIFY at all. outbox_notify_throttled (00003) stays, unused.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify_wake() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_xact_lock_shared(TG_RELID::integer, 1869968484) THEN
        IF NOT pg_try_advisory_lock(TG_RELID::integer, 1869968483) THEN
            RETURN NULL; -- a relay is busy: it claims this commit without a wake-up
        END IF;
        PERFORM pg_advisory_unlock(TG_RELID::integer, 1869968483);
    END IF; -- else a relay is waiting for the commits in flight: notify
    IF pg_try_advisory_xact_lock(TG_RELID::integer, 1869968482) THEN
        PERFORM pg_notify(TG_TABLE_NAME, '');
    END IF; -- else a concurrent commit is notifying right now
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- The trigger calls outbox_notify_wake, and its WHEN clause (00003's
-- once-per-transaction flag, outbox.wake_queued, unchanged) becomes one
-- function call: PostgreSQL compiles a trigger's WHEN clause again for
-- every statement that inserts, and for a producer's one-row INSERT the
-- inline CASE cost about as much CPU as the rest of the wake-up (one
-- session, one-row transactions, commits not waiting for the flush: 66-69
-- µs of server CPU per transaction with it, 54-55 µs with the call, 10 µs
-- for a plain table's insert). A multi-row INSERT or COPY pays the call
-- for every row instead: 0.2-0.9 µs more per row.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify_once() RETURNS boolean
    LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('outbox.wake_queued', true) = 'on' THEN
        RETURN false;
    END IF;
    PERFORM set_config('outbox.wake_queued', 'on', true);
    RETURN true;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER outbox_notify ON outbox;
CREATE CONSTRAINT TRIGGER outbox_notify
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (outbox_notify_once())
    EXECUTE FUNCTION outbox_notify_wake();

-- +goose Down
DROP TRIGGER outbox_notify ON outbox;
CREATE CONSTRAINT TRIGGER outbox_notify
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (CASE WHEN current_setting('outbox.wake_queued', true) = 'on' THEN false
               ELSE set_config('outbox.wake_queued', 'on', true) = 'on' END)
    EXECUTE FUNCTION outbox_notify_throttled();
DROP FUNCTION outbox_notify_once();
DROP FUNCTION outbox_notify_wake();
