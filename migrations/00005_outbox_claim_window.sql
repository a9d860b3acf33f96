-- pgoutbox-migration: 00005_outbox_claim_window.sql
-- +goose Up
-- Claims that stay cheap while a long transaction pins the xmin horizon.
--
-- A claim that scans outbox_pending from its start walks the index entries
-- of every row claimed since the oldest open snapshot began: those row
-- versions are dead but not removable while the snapshot is open (a
-- pg_dump, a report in REPEATABLE READ, an idle-in-transaction session), so
-- btree cannot mark them killed and every claim visits each of them in the
-- heap. Measured before this migration: 2,000 events/s, one snapshot held 150 s, p99
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


-- Ordered events: the same cursor, over heads. OutboxClaimOrdered finds each
-- aggregate's head with a loose index scan whose every step starts at the
-- aggregate's first index entry, i.e. at the entries of its delivered rows,
-- which a held snapshot keeps: the claim walks them all. Instead each row
-- now says whether it is its aggregate's head, and a head is claimed through
-- the cursor like an unordered row (OutboxClaimOrderedWindow).
-- * head: true on the row that is (or was, once done) the first undelivered
--   row of its aggregate in seq order. At most one undelivered row per
--   aggregate has it. Set in two places, both in this migration's triggers:
--   - at COMMIT (outbox_commit_order, below): the first new row of an
--     aggregate becomes head when the aggregate's previous row (the highest
--     seq before it, any status) is done or there is none;
--   - when a head becomes done (outbox_head_handoff, below): the next
--     undelivered row of its aggregate becomes head, stamped with the
--     current txid so that cursors see it as new.
--   The two cannot miss each other: both hold the aggregate's advisory lock
--   (00004's key) when they look, and each reads after taking it, read
--   committed. PostgreSQL releases the lock only once the holder's commit is
--   visible, so whichever comes second sees the other's work: the COMMIT
--   sees the previous row done, or the hand-off sees the new row. Neither
--   takes a row lock a claim could trip over (FOR UPDATE SKIP LOCKED would
--   pass a head that a producer merely looked at).
-- * head IS NULL: not decided yet. A producer transaction in REPEATABLE READ
--   or SERIALIZABLE cannot decide at COMMIT (its snapshot may not show the
--   previous row's latest state, and locking it would fail with a
--   serialization error), so its first row of each aggregate is left
--   undecided and the dispatcher's recovery lane decides it
--   (outbox_resolve_heads through OutboxResolveHeads, every ReapInterval),
--   read committed, under the same lock.
-- * outbox_ordered_seq: (aggregate_id, seq) over every sequenced ordered row,
--   done included, read backwards from the end of an aggregate to find its
--   previous row (one descent: the newest versions come first).
-- * outbox_ordered_txid / outbox_ordered_due: the fresh and due lanes of
--   heads, as outbox_pending_txid / outbox_pending_due are of unordered rows.
ALTER TABLE outbox ADD COLUMN head boolean DEFAULT false;

UPDATE outbox
   SET head = true
 WHERE id IN (SELECT DISTINCT ON (aggregate_id) id
                FROM outbox
               WHERE ordered AND seq IS NOT NULL AND status IN ('pending', 'processing', 'dead')
               ORDER BY aggregate_id, seq);

CREATE INDEX outbox_ordered_seq ON outbox (aggregate_id, seq)
    WHERE ordered AND seq IS NOT NULL;

CREATE INDEX outbox_ordered_txid ON outbox (txid, id)
    WHERE ordered AND head AND status = 'pending';

CREATE INDEX outbox_ordered_due ON outbox (available_at, id)
    WHERE ordered AND head AND status = 'pending' AND available_at > created_at;

CREATE INDEX outbox_ordered_undecided ON outbox (id)
    WHERE ordered AND head IS NULL;

-- outbox_commit_order as in 00004, plus the head decision for the first new
-- row of each aggregate (the rest of 00004's comment holds).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    from_id bigint := nullif(current_setting('outbox.seq_from', true), '')::bigint;
    to_id   bigint := nullif(current_setting('outbox.seq_to', true), '')::bigint;
    a         record;
    prev      record;
    heads     bigint[] := '{}';
    undecided bigint[] := '{}';
BEGIN
    PERFORM set_config('outbox.seq_from', '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        from_id := NEW.id;
        to_id := NEW.id;
        PERFORM pg_advisory_xact_lock((TG_RELID::bigint << 32) | (hashtext(NEW.aggregate_id)::bigint & 4294967295));
    ELSE
        PERFORM pg_advisory_xact_lock(k.key)
           FROM (SELECT DISTINCT (TG_RELID::bigint << 32) | (hashtext(u.aggregate_id)::bigint & 4294967295) AS key
                   FROM outbox AS u
                  WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                  ORDER BY 1) AS k;
    END IF;
    -- Head decision, per aggregate, before this transaction's rows get their
    -- seq: the aggregate's previous row is the sequenced one with the highest
    -- seq (this transaction's rows have none yet).
    FOR a IN SELECT DISTINCT ON (u.aggregate_id) u.id, u.aggregate_id
               FROM outbox AS u
              WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
              ORDER BY u.aggregate_id, u.id
    LOOP
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            undecided := undecided || a.id;
            CONTINUE;
        END IF;
        SELECT p.id, p.status INTO prev
          FROM outbox AS p
         WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC
         LIMIT 1;
        IF NOT FOUND OR prev.status = 'done' THEN
            heads := heads || a.id;
        END IF;
    END LOOP;
    -- nextval is evaluated after the ORDER BY of its own subquery level.
    UPDATE outbox AS o
       SET seq = s.seq,
           head = CASE WHEN o.id = ANY (undecided) THEN NULL ELSE o.id = ANY (heads) END
      FROM (SELECT m.id, nextval('outbox_seq') AS seq
              FROM (SELECT u.id
                      FROM outbox AS u
                     WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                     ORDER BY u.id) AS m) AS s
     WHERE o.id = s.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- CREATE OR REPLACE resets the function's settings: pin search_path again.
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc,
                   (SELECT n.nspname
                      FROM pg_catalog.pg_class AS c
                      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                     WHERE c.oid = 'outbox'::regclass));
END;
$$;
-- +goose StatementEnd

-- The hand-off: a head that becomes done (delivered, or skipped by a person)
-- passes its place to the next undelivered row of its aggregate. Runs in the
-- finalizing statement, for ordered heads only (the WHEN clause is
-- evaluated without calling the function). The successor is found forward
-- from the done row's seq in outbox_ordered_head, so the entries of rows
-- delivered before are never read.
-- +goose StatementBegin
CREATE FUNCTION outbox_head_handoff() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
BEGIN
    PERFORM pg_advisory_xact_lock((TG_RELID::bigint << 32) | (hashtext(NEW.aggregate_id)::bigint & 4294967295));
    UPDATE outbox
       SET head = true,
           txid = pg_current_xact_id()
     WHERE id = (SELECT s.id
                   FROM outbox AS s
                  WHERE s.ordered
                    AND s.seq IS NOT NULL
                    AND s.status IN ('pending', 'processing', 'dead')
                    AND s.aggregate_id = NEW.aggregate_id
                    AND s.seq > NEW.seq
                  ORDER BY s.aggregate_id, s.seq
                  LIMIT 1)
       AND head IS NOT TRUE;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_head_handoff'::regproc,
                   (SELECT n.nspname
                      FROM pg_catalog.pg_class AS c
                      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                     WHERE c.oid = 'outbox'::regclass));
END;
$$;
-- +goose StatementEnd

-- outbox_resolve_heads decides up to max_rows undecided heads (head IS
-- NULL: rows of REPEATABLE READ or SERIALIZABLE producers), by the COMMIT
-- rule, under the aggregates' advisory locks taken in key order, reading
-- after the locks (read committed only). Returns the rows decided. Decided
-- rows are stamped with the current txid, so a head is new to every cursor.
-- +goose StatementBegin
CREATE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    ids bigint[];
    n   integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    SELECT array_agg(u.id) INTO ids
      FROM (SELECT u.id
              FROM outbox AS u
             WHERE u.ordered AND u.head IS NULL AND u.seq IS NOT NULL
             ORDER BY u.id
             LIMIT max_rows) AS u;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(k.key)
       FROM (SELECT DISTINCT ('outbox'::regclass::oid::bigint << 32) | (hashtext(u.aggregate_id)::bigint & 4294967295) AS key
               FROM outbox AS u
              WHERE u.id = ANY (ids)
              ORDER BY 1) AS k;
    UPDATE outbox AS o
       SET head = (d.prev_id IS NULL OR d.prev_status = 'done'),
           txid = pg_current_xact_id()
      FROM (SELECT u.id, p.id AS prev_id, p.status AS prev_status
              FROM outbox AS u
              LEFT JOIN LATERAL (
                    SELECT p.id, p.status
                      FROM outbox AS p
                     WHERE p.ordered
                       AND p.seq IS NOT NULL
                       AND p.aggregate_id = u.aggregate_id
                       AND p.seq < u.seq
                     ORDER BY p.aggregate_id, p.seq DESC
                     LIMIT 1) AS p ON true
             WHERE u.id = ANY (ids)) AS d
     WHERE o.id = d.id
       AND o.head IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_resolve_heads'::regproc,
                   (SELECT n.nspname
                      FROM pg_catalog.pg_class AS c
                      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                     WHERE c.oid = 'outbox'::regclass));
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_head_handoff
    AFTER UPDATE ON outbox
    FOR EACH ROW
    WHEN (OLD.ordered AND OLD.head AND NEW.status = 'done' AND OLD.status <> 'done')
    EXECUTE FUNCTION outbox_head_handoff();

-- +goose Down
DROP FUNCTION outbox_resolve_heads(integer);
DROP TRIGGER outbox_head_handoff ON outbox;
DROP FUNCTION outbox_head_handoff();
-- outbox_commit_order as 00004 wrote it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    from_id bigint := nullif(current_setting('outbox.seq_from', true), '')::bigint;
    to_id   bigint := nullif(current_setting('outbox.seq_to', true), '')::bigint;
BEGIN
    -- Later ordered inserts of this transaction (SET CONSTRAINTS ... IMMEDIATE,
    -- or a deferred trigger inserting at COMMIT) queue the next run.
    PERFORM set_config('outbox.seq_from', '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        -- One ordered row (NEW, the one that queued this run).
        PERFORM pg_advisory_xact_lock((TG_RELID::bigint << 32) | (hashtext(NEW.aggregate_id)::bigint & 4294967295));
        UPDATE outbox SET seq = nextval('outbox_seq') WHERE id = NEW.id AND seq IS NULL;
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(k.key)
       FROM (SELECT DISTINCT (TG_RELID::bigint << 32) | (hashtext(u.aggregate_id)::bigint & 4294967295) AS key
               FROM outbox AS u
              WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
              ORDER BY 1) AS k;
    -- nextval is evaluated after the ORDER BY of its own subquery level.
    UPDATE outbox AS o
       SET seq = s.seq
      FROM (SELECT m.id, nextval('outbox_seq') AS seq
              FROM (SELECT u.id
                      FROM outbox AS u
                     WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                     ORDER BY u.id) AS m) AS s
     WHERE o.id = s.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc,
                   (SELECT n.nspname
                      FROM pg_catalog.pg_class AS c
                      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                     WHERE c.oid = 'outbox'::regclass));
END;
$$;
-- +goose StatementEnd
DROP INDEX outbox_ordered_undecided;
DROP INDEX outbox_ordered_due;
DROP INDEX outbox_ordered_txid;
DROP INDEX outbox_ordered_seq;
ALTER TABLE outbox DROP COLUMN head;
DROP TRIGGER outbox_claimable_stamp ON outbox;
DROP FUNCTION outbox_claimable_stamp();
DROP INDEX outbox_pending_due;
DROP INDEX outbox_pending_txid;
ALTER TABLE outbox DROP COLUMN txid;
