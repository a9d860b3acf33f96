-- pgoutbox-migration: 00005_outbox_claim_window.sql
-- +goose Up
-- Claims that stay cheap while a long transaction pins the xmin horizon.
--
-- A claim that scans outbox_pending from its start walks the index entries
-- of every row claimed since the oldest open snapshot began: those row
-- versions are dead but not removable while the snapshot is open (a
-- pg_dump, a report in REPEATABLE READ, an idle-in-transaction session), so
-- btree cannot mark them killed and every claim visits each of them in the
-- heap. Measured (issue 14): 2,000 events/s, one snapshot held 150 s, p99
-- from 42 ms to 13.6 s.
--
-- OutboxClaimWindow (queries/window.sql) instead starts from a cursor kept by
-- the dispatcher: a txid snapshot plus a keyset, in the manner of PgQ's
-- ticks. It needs to know which transaction made each row claimable:
-- * txid: the transaction that inserted the row, or that last made it
--   pending again (retry, defer, hand-back, redrive, a hand-written UPDATE)
--   or moved its available_at while pending. Inserts take the default; the
--   trigger below stamps the rest, so no query (ours or a user's) has to.
--   A row is new to a cursor exactly when its txid is not visible in the
--   cursor's snapshot.
-- * outbox_pending_txid: the fresh lane, (txid, id) over pending unordered
--   rows. A claim reads the entries of transactions that were still open at
--   the cursor (a few point lookups) and the range past the cursor's xmax,
--   never the region behind it.
-- * outbox_pending_due: the due lane, (available_at, id) over pending
--   unordered rows whose available_at lies after created_at (retries, defers,
--   hand-backs, redrives, events scheduled for later): they become claimable
--   by the clock, not by a commit, so the claim finds them by time, from the
--   cursor's timestamp on.
-- Existing rows get this migration's txid (every later snapshot sees it), so
-- a dispatcher's first pass, which starts from nothing, claims them in
-- (txid, id) = id order.
ALTER TABLE outbox ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE INDEX outbox_pending_txid ON outbox (txid, id)
    WHERE status = 'pending' AND NOT ordered;

CREATE INDEX outbox_pending_due ON outbox (available_at, id)
    WHERE status = 'pending' AND NOT ordered AND available_at > created_at;

-- The stamp: a row that becomes pending again, or whose available_at moves
-- while it is pending, gets the current transaction's id. The WHEN clause
-- is evaluated without calling the function, so claims and finalizes to
-- done or dead pay nothing for it.
-- +goose StatementBegin
CREATE FUNCTION outbox_claimable_stamp() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_claimable_stamp
    BEFORE UPDATE ON outbox
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND
          (OLD.status IS DISTINCT FROM 'pending' OR NEW.available_at IS DISTINCT FROM OLD.available_at))
    EXECUTE FUNCTION outbox_claimable_stamp();

-- +goose Down
DROP TRIGGER outbox_claimable_stamp ON outbox;
DROP FUNCTION outbox_claimable_stamp();
DROP INDEX outbox_pending_due;
DROP INDEX outbox_pending_txid;
ALTER TABLE outbox DROP COLUMN txid;
