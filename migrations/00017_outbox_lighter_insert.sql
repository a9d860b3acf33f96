-- pgoutbox-migration: 00017_outbox_lighter_insert.sql
-- +goose NO TRANSACTION
-- +goose Up
-- A lighter INSERT for producers: 11 indexes instead of 14, and no unused
-- functions. PostgreSQL opens every index of the table for each INSERT and
-- tests each partial index's predicate, whether or not the row enters it,
-- so each index costs a producer about 1.5% of a one-row INSERT's server
-- time even when the row is never written into it. Three pairs of partial
-- indexes, each pair read by the same kind of query, become one index each;
-- every query still finds its rows through an index (its WHERE clause
-- implies the merged predicate), and a row enters as many indexes as
-- before:
-- * outbox_finished (status, done_at) replaces outbox_done_at (done rows,
--   done_at) and outbox_skipped (skipped rows, done_at): a query for one
--   status reads that status's part of the index, in done_at order, as
--   before. The console's throughput chart and the done count stay index
--   only.
-- * outbox_due replaces outbox_pending_due (unordered) and
--   outbox_ordered_due (ordered heads): pending rows not yet due at their
--   creation (in backoff, deferred, scheduled), which the claims read by
--   available_at. Each claim skips the other kind's entries on their table
--   rows; there are as few of them as rows waiting for a retry.
-- * outbox_ordered_unresolved replaces outbox_ordered_unsequenced (ordered
--   rows without seq: a producer's transaction in flight, or rows restored
--   from another server) and outbox_ordered_undecided (rows whose head was
--   left undecided by a REPEATABLE READ or SERIALIZABLE producer). Both are
--   read now and then off the claim path (the recovery lane, pgoutbox
--   repair), never by a claim.
-- The wake-up functions outbox_notify, outbox_notify_throttled,
-- outbox_notify_once and outbox_notify_wake are dropped: the trigger
-- outbox_notify calls outbox_notify_idle (00015), and nothing calls them.
-- Relays and tools of earlier versions keep working on this schema.
-- The indexes are built and dropped CONCURRENTLY: producers and relays go
-- on while it runs (each build scans the table twice). That cannot run in a
-- transaction block, hence NO TRANSACTION: goose runs each statement alone;
-- apply the file the same way if you apply it by hand. If a build fails or
-- is cancelled, it leaves an invalid index behind: drop that index and run
-- the migration again.
CREATE INDEX CONCURRENTLY outbox_finished ON outbox (status, done_at) INCLUDE (created_at)
    WHERE status IN ('done', 'skipped');
DROP INDEX CONCURRENTLY outbox_done_at;
DROP INDEX CONCURRENTLY outbox_skipped;

CREATE INDEX CONCURRENTLY outbox_due ON outbox (available_at, id)
    WHERE status = 'pending' AND available_at > created_at AND (NOT ordered OR head);
DROP INDEX CONCURRENTLY outbox_pending_due;
DROP INDEX CONCURRENTLY outbox_ordered_due;

CREATE INDEX CONCURRENTLY outbox_ordered_unresolved ON outbox (id)
    WHERE ordered AND (seq IS NULL OR head IS NULL);
DROP INDEX CONCURRENTLY outbox_ordered_unsequenced;
DROP INDEX CONCURRENTLY outbox_ordered_undecided;

DROP FUNCTION outbox_notify();
DROP FUNCTION outbox_notify_throttled();
DROP FUNCTION outbox_notify_once();
DROP FUNCTION outbox_notify_wake();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_NAME, '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION outbox_notify_throttled() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_xact_lock(TG_RELID::integer, 1869968482) THEN
        PERFORM pg_notify(TG_TABLE_NAME, '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
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
-- +goose StatementBegin
CREATE FUNCTION outbox_notify_wake() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_xact_lock_shared(TG_RELID::integer, 1869968484) THEN
        IF NOT pg_try_advisory_lock(TG_RELID::integer, 1869968483) THEN
            RETURN NULL;
        END IF;
        PERFORM pg_advisory_unlock(TG_RELID::integer, 1869968483);
    END IF;
    IF pg_try_advisory_xact_lock(TG_RELID::integer, 1869968482) THEN
        PERFORM pg_notify(TG_TABLE_NAME, '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY outbox_ordered_undecided ON outbox (id) WHERE ordered AND head IS NULL;
CREATE INDEX CONCURRENTLY outbox_ordered_unsequenced ON outbox (id) WHERE ordered AND seq IS NULL;
DROP INDEX CONCURRENTLY outbox_ordered_unresolved;
CREATE INDEX CONCURRENTLY outbox_ordered_due ON outbox (available_at, id)
    WHERE ordered AND head AND status = 'pending' AND available_at > created_at;
CREATE INDEX CONCURRENTLY outbox_pending_due ON outbox (available_at, id)
    WHERE status = 'pending' AND NOT ordered AND available_at > created_at;
DROP INDEX CONCURRENTLY outbox_due;
CREATE INDEX CONCURRENTLY outbox_skipped ON outbox (done_at) WHERE status = 'skipped';
CREATE INDEX CONCURRENTLY outbox_done_at ON outbox (done_at) INCLUDE (created_at) WHERE status = 'done';
DROP INDEX CONCURRENTLY outbox_finished;
