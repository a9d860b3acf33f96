-- pgoutbox-migration: 00019_outbox_wake_from_enqueue.sql
-- +goose Up
-- The wake-up moves from a row trigger into the statements that enqueue:
-- OutboxEnqueue does it in its own INSERT, and OutboxWake (queries/enqueue.sql)
-- once per transaction after a COPY or an INSERT of your own. The trigger
-- outbox_notify ran for every inserted row, on every producer's
-- transaction, whether or not a relay waited: its WHEN clause took an
-- advisory lock in the shared lock table for each row, about an eighth of
-- the server time of a one-row INSERT. Now an INSERT into outbox runs
-- nothing but the commit-order trigger's WHEN clause (false for unordered
-- rows).
--
-- The protocol is the one of 00015, once per statement instead of once per
-- row: the statement tries to take the idle lock (table oid, 1869968485)
-- shared for its transaction; when it can, no relay waits and none can
-- start waiting before this transaction ends; when it cannot, a relay waits
-- (or is about to) and the statement tries to take the notify gate (table
-- oid, 1869968482) for its transaction: with it, it queues a NOTIFY on the
-- channel named after the table, sent at COMMIT (a rollback sends nothing);
-- without it, another producer transaction notifies when it ends. SET LOCAL
-- outbox.wake_queued = on keeps its meaning: no lock, no NOTIFY (for
-- PREPARE TRANSACTION).
--
-- What changes:
-- * Rows inserted by other means (INSERT or COPY of your own, a restore,
--   logical replication) wake nobody unless the transaction also runs
--   OutboxWake: relays find them within PollInterval (1 s by default).
--   Producers of an earlier pgoutbox version notify no more: upgrade their
--   queries (queries/enqueue.sql), or their events wait for a poll.
-- * The notify gate is held from the enqueue to the end of the
--   transaction, no longer only while it commits: while a relay waits and a
--   producer transaction that enqueued stays open, other producers' commits
--   send no NOTIFY; the relay finds their rows in its wake window after the
--   holder's notification, or at its next poll when the holder rolls back
--   or stays open for long. Without a gate every committing producer would
--   notify, and PostgreSQL commits notifying transactions one at a time.
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify_idle();

-- +goose Down
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

CREATE CONSTRAINT TRIGGER outbox_notify
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (current_setting('outbox.wake_queued', true) IS DISTINCT FROM 'on'
          AND NOT pg_try_advisory_xact_lock_shared(new.tableoid::integer, 1869968485))
    EXECUTE FUNCTION outbox_notify_idle();
