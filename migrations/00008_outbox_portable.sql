-- pgoutbox-migration: 00008_outbox_portable.sql
-- +goose Up
-- An outbox that keeps working when its rows move: several outboxes in one
-- database, one transaction writing to two of them, and every taker of the
-- aggregates' locks in one order.
--
-- outbox_lock_aggregates takes the transaction-level advisory lock of every
-- aggregate named in its argument, once each and in key order. Every
-- statement that locks aggregates goes through it: producers' COMMITs
-- (outbox_commit_order), the head hand-off, the head decisions and repairs
-- of the relay, the relay's batched finalize, and the skips of the CLI and
-- the console. Two lock takers always meet in the same order, so none of
-- them waits for the other in a cycle and PostgreSQL never has to roll a
-- producer's transaction back with "deadlock detected". The key of an
-- aggregate is the one migration 00004 describes: (table oid << 32) |
-- (hashtext(aggregate_id) & 0xffffffff), in the single-bigint advisory key
-- space. Returns the number of locks taken.
-- +goose StatementBegin
CREATE FUNCTION outbox_lock_aggregates(aggregate_ids text[]) RETURNS integer
    LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
    n integer := 0;
BEGIN
    FOR k IN SELECT DISTINCT ('outbox'::regclass::oid::bigint << 32) | (hashtext(a)::bigint & 4294967295)
               FROM unnest(aggregate_ids) AS a
              WHERE a IS NOT NULL
              ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(k);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- outbox_commit_order as in 00005, with its two transaction-local settings
-- named after the table's oid (outbox.seq_from_<oid>, outbox.seq_to_<oid>).
-- Named after the table name alone, they were shared by two outboxes of the
-- same name in two schemas: a transaction writing an ordered event to each
-- sequenced only the first, and the other stayed unsequenced (never
-- delivered). The lock goes through outbox_lock_aggregates.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    from_key  text := 'outbox.seq_from_' || TG_RELID;
    from_id   bigint := nullif(current_setting(from_key, true), '')::bigint;
    to_id     bigint := nullif(current_setting('outbox.seq_to_' || TG_RELID, true), '')::bigint;
    a         record;
    prev      record;
    heads     bigint[] := '{}';
    undecided bigint[] := '{}';
BEGIN
    PERFORM set_config(from_key, '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        from_id := NEW.id;
        to_id := NEW.id;
        PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
    ELSE
        PERFORM outbox_lock_aggregates(ARRAY(
                SELECT u.aggregate_id
                  FROM outbox AS u
                 WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL));
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

-- The trigger keys the span by the inserted row's table (NEW.tableoid: the
-- same oid as the function's TG_RELID), as the function reads it. (The
-- wake-up flag of 00003, outbox.wake_queued, stays shared by outboxes of
-- the same name: they notify on the same channel, the table name, so the
-- one notification a transaction queues wakes the relays of both.)
DROP TRIGGER outbox_commit_order ON outbox;
CREATE CONSTRAINT TRIGGER outbox_commit_order
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.ordered AND
          CASE WHEN coalesce(current_setting('outbox.seq_from_' || NEW.tableoid, true), '') = ''
               THEN set_config('outbox.seq_from_' || NEW.tableoid, NEW.id::text, true) <> ''
                    AND set_config('outbox.seq_to_' || NEW.tableoid, NEW.id::text, true) <> ''
               ELSE (set_config('outbox.seq_from_' || NEW.tableoid,
                                least(current_setting('outbox.seq_from_' || NEW.tableoid)::bigint, NEW.id)::text, true)
                     || set_config('outbox.seq_to_' || NEW.tableoid,
                                   greatest(current_setting('outbox.seq_to_' || NEW.tableoid)::bigint, NEW.id)::text, true)) = '' END)
    EXECUTE FUNCTION outbox_commit_order();

-- Rows that arrive from another server. pg_dump/pg_restore, a logical
-- replication copy and a base backup carry rows whose txid, seq and id were
-- assigned by the server they came from:
-- * txid: a txid that this server has not assigned yet (at or beyond the
--   current snapshot's xmax; a cluster older than one xid epoch gives
--   txids of 2^32 and more) is never claimable by a claim cursor, which
--   claims only rows of transactions committed before its snapshot. The
--   relay re-stamps such rows with its own transaction's txid
--   (OutboxRestampForeign, queries/repair.sql) when it starts and on every
--   pass of its recovery lane; a visible row never has such a txid
--   otherwise, so the test is exact.
-- * seq: an ordered row inserted while the table's triggers were off
--   (session_replication_role = replica, as logical replication applies
--   rows and pg_restore --disable-triggers loads them; ALTER TABLE ...
--   DISABLE TRIGGER) is never sequenced, so never its aggregate's head. A
--   committed row is always sequenced by its own COMMIT, so a visible
--   unsequenced row is exactly such a row. outbox_ordered_unsequenced finds
--   them; outbox_repair_unsequenced sequences them.
-- * the sequences: logical replication copies rows but not sequences, so
--   after a cutover the subscriber's identity sequence and outbox_seq lag
--   behind the rows: producers' inserts collide on id, and new ordered
--   events would be sequenced before undelivered ones.
--   outbox_repair_sequences moves them past the rows.
-- `pgoutbox repair` runs all of these at once; the relay runs them by itself.
--
-- outbox_ordered_unsequenced: every ordered row is in it from its INSERT
-- until its COMMIT sequences it (one more index entry per ordered event);
-- what stays in it is the rows that were never sequenced.
CREATE INDEX outbox_ordered_unsequenced ON outbox (id)
    WHERE ordered AND seq IS NULL;

-- outbox_repair_unsequenced sequences up to max_rows visible ordered rows
-- that have no seq, in id order (the order they were inserted in: their
-- commit order is not known), after every row the aggregate already has,
-- under the aggregates' locks (outbox_lock_aggregates), reading after
-- taking them (read committed only), with outbox_seq moved past the seq of
-- their aggregates' rows first if it is behind. The first undelivered one
-- of an aggregate becomes its head when the aggregate's previous row (the
-- highest seq before it) is done or there is none, as at COMMIT; every row it
-- sequences is stamped with the current txid, so it is new to every
-- cursor. Returns the rows sequenced.
-- +goose StatementBegin
CREATE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    ids   bigint[];
    a     record;
    prev  record;
    heads bigint[] := '{}';
    top   bigint := 0;
    n     integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    FOR a IN SELECT u.aggregate_id, min(u.id) FILTER (WHERE u.status <> 'done') AS first_id
               FROM outbox AS u
              WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
              GROUP BY u.aggregate_id
    LOOP
        SELECT p.id, p.status, p.seq INTO prev
          FROM outbox AS p
         WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC
         LIMIT 1;
        IF FOUND THEN
            top := greatest(top, prev.seq);
        END IF;
        IF a.first_id IS NOT NULL AND (NOT FOUND OR prev.status = 'done') THEN
            heads := heads || a.first_id;
        END IF;
    END LOOP;
    -- The rows go after every row their aggregates have, even when
    -- outbox_seq is behind them (a copy that did not carry it).
    IF top >= outbox_sequence_next('outbox_seq') THEN
        PERFORM setval('outbox_seq', top);
    END IF;
    UPDATE outbox AS o
       SET seq = s.seq,
           head = o.id = ANY (heads),
           txid = pg_current_xact_id()
      FROM (SELECT m.id, nextval('outbox_seq') AS seq
              FROM (SELECT u.id
                      FROM outbox AS u
                     WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
                     ORDER BY u.id) AS m) AS s
     WHERE o.id = s.id
       AND o.seq IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- outbox_sequence_next is the value nextval(seq) would return next,
-- without taking it (last_value, and whether it was handed out yet).
-- +goose StatementBegin
CREATE FUNCTION outbox_sequence_next(seq regclass) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END FROM %s AS s', seq) INTO n;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- outbox_repair_sequences moves the identity sequence of id and outbox_seq
-- past the highest id and seq in the table, where they are behind (never
-- back). With check_only it changes nothing and only says how many are
-- behind. It looks cheaply first: the highest id (one primary key descent)
-- and the seq of the ordered rows among the last 1,000 ids; only when one of
-- them is ahead of its sequence (or always, with scan_all) does it read the
-- highest seq of all ordered rows (a scan of the table). Runs as the table
-- owner: relays and operators need no sequence grants. Returns how many
-- sequences are (check_only) or were behind.
-- +goose StatementBegin
CREATE FUNCTION outbox_repair_sequences(check_only boolean, scan_all boolean) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    ids     regclass := pg_get_serial_sequence('outbox', 'id')::regclass;
    top_id  bigint;
    top_seq bigint;
    next_id bigint;
    behind  integer := 0;
BEGIN
    -- The rows first, the sequences after: a sequence only moves forward, so
    -- a value read after the rows is never behind them unless it really is.
    top_id := (SELECT max(o.id) FROM outbox AS o);
    top_seq := (SELECT max(r.seq) FROM (SELECT o.seq, o.ordered FROM outbox AS o ORDER BY o.id DESC LIMIT 1000) AS r
                 WHERE r.ordered);
    IF scan_all OR top_seq >= outbox_sequence_next('outbox_seq') THEN
        top_seq := (SELECT max(o.seq) FROM outbox AS o WHERE o.ordered);
    END IF;
    next_id := outbox_sequence_next(ids);
    IF top_id >= next_id THEN
        behind := behind + 1;
        IF NOT check_only THEN
            PERFORM setval(ids, greatest(top_id, outbox_sequence_next(ids) - 1));
        END IF;
    END IF;
    IF top_seq >= outbox_sequence_next('outbox_seq') THEN
        behind := behind + 1;
        IF NOT check_only THEN
            PERFORM setval('outbox_seq', greatest(top_seq, outbox_sequence_next('outbox_seq') - 1));
        END IF;
    END IF;
    RETURN behind;
END;
$$;
-- +goose StatementEnd

-- The head hand-off and the head decisions of 00005, their locks taken
-- through outbox_lock_aggregates (the rest as 00005 wrote them).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_head_handoff() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
BEGIN
    PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
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
CREATE OR REPLACE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
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
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
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

-- Every function above runs with the search_path pinned to the table's
-- schema (pg_temp last), as 00004 explains; CREATE OR REPLACE resets it.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s(text[]) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_lock_aggregates'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_repair_unsequenced'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_head_handoff'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_resolve_heads'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(boolean, boolean) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_repair_sequences'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(regclass) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_sequence_next'::regproc, nsp);
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- outbox_head_handoff and outbox_resolve_heads as 00005 wrote them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_head_handoff() RETURNS trigger
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
CREATE OR REPLACE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
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
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_head_handoff'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_resolve_heads'::regproc, nsp);
END;
$$;
-- +goose StatementEnd
DROP FUNCTION outbox_repair_sequences(boolean, boolean);
DROP FUNCTION outbox_sequence_next(regclass);
DROP FUNCTION outbox_repair_unsequenced(integer);
DROP INDEX outbox_ordered_unsequenced;
DROP TRIGGER outbox_commit_order ON outbox;
CREATE CONSTRAINT TRIGGER outbox_commit_order
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.ordered AND
          CASE WHEN coalesce(current_setting('outbox.seq_from', true), '') = ''
               THEN set_config('outbox.seq_from', NEW.id::text, true) <> ''
                    AND set_config('outbox.seq_to', NEW.id::text, true) <> ''
               ELSE (set_config('outbox.seq_from', least(current_setting('outbox.seq_from')::bigint, NEW.id)::text, true)
                     || set_config('outbox.seq_to', greatest(current_setting('outbox.seq_to')::bigint, NEW.id)::text, true)) = '' END)
    EXECUTE FUNCTION outbox_commit_order();
-- outbox_commit_order as 00005 wrote it.
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
DROP FUNCTION outbox_lock_aggregates(text[]);
