-- pgoutbox-migration: 00020_outbox_sequenced.sql
-- +goose Up
-- An ordered producer's COMMIT writes one narrow row instead of a second
-- version of the wide row. Until now the commit-order trigger took the
-- aggregate's lock, drew each row's seq, read the aggregate's latest row
-- and updated the event in place (seq, prev_seq, head, sent_seq): a second
-- version of the whole row, payload included, and five index entries, all
-- while the aggregate's lock was held, so a hot aggregate's commits queued
-- behind that work. Now the trigger takes the lock, draws the seq and
-- inserts (seq, message_id) into outbox_sequenced; the relay moves those
-- rows into the events (outbox_decide_committed), deciding prev_seq, head
-- and sent_seq under the same aggregate locks, right before each ordered
-- claim.
--
-- What stays: seq is still drawn at COMMIT under the aggregate's lock, so
-- it is still commit order per aggregate; an event is claimable only once
-- it is its aggregate's head; nothing waits for an open transaction.
-- What changes:
-- * Every isolation level takes the same path: the trigger no longer
--   decides heads in READ COMMITTED only.
-- * An ordered event's seq, prev_seq and head are set by the relay shortly
--   after COMMIT, not at COMMIT; until then the event has no seq and is not
--   claimable. Tools that read seq right after a producer's commit run
--   SELECT outbox_resolve_heads(n) first (pgoutbox repair does the same).
-- * outbox_resolve_heads(n) is outbox_decide_committed from no floor: a
--   relay of an earlier version decides the new rows on its recovery pass,
--   so during a rolling upgrade its ordered events wait up to its
--   ReapInterval, never longer.
-- * Rows copied in without their COMMIT trigger (a restore, a logical copy)
--   are sequenced the same way: outbox_repair_unsequenced queues them in
--   outbox_sequenced in id order, and the relay decides them.
-- * A TRUNCATE of outbox leaves its rows of outbox_sequenced behind; the
--   relay drops them (they match no event) the next time it decides.
-- Heads left undecided by REPEATABLE READ producers are decided here first,
-- when the migration runs in READ COMMITTED (goose's default); any left
-- are flagged by the hand-off or by the relay's head repair.
CREATE TABLE outbox_sequenced (
    seq        bigint PRIMARY KEY,
    message_id bigint NOT NULL
);

-- Whoever may read the outbox may read it (the gauges count what waits in
-- it; docs/roles.sql grants it to pgoutbox_relay on a new install).
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee::regrole AS grantee
               FROM pg_catalog.pg_class AS c, aclexplode(c.relacl) AS a
              WHERE c.oid = 'outbox'::regclass
                AND a.privilege_type = 'SELECT'
                AND a.grantee <> 0
                AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT ON %s TO %s', 'outbox_sequenced'::regclass, r.grantee);
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        WHILE outbox_resolve_heads(10000) > 0 LOOP END LOOP;
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    from_key text := 'outbox.seq_from_' || TG_RELID;
    from_id  bigint := nullif(current_setting(from_key, true), '')::bigint;
    to_id    bigint := nullif(current_setting('outbox.seq_to_' || TG_RELID, true), '')::bigint;
BEGIN
    PERFORM set_config(from_key, '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        -- One ordered row (NEW, the one that queued this run).
        PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
        INSERT INTO outbox_sequenced (seq, message_id) VALUES (nextval('outbox_seq'), NEW.id);
        RETURN NULL;
    END IF;
    -- The transaction's own ordered rows in its id span (other transactions'
    -- rows in the span carry their own txid).
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u
                                          WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                                            AND u.txid = pg_current_xact_id()));
    -- nextval is evaluated after the ORDER BY of the subquery below it.
    INSERT INTO outbox_sequenced (seq, message_id)
    SELECT nextval('outbox_seq'), m.id
      FROM (SELECT u.id FROM outbox AS u
             WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
               AND u.txid = pg_current_xact_id()
             ORDER BY u.id) AS m;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outbox_decide_committed(max_rows integer, INOUT after_seq bigint, INOUT seen_seq bigint,
                                        INOUT seen_holders text[], OUT decided integer)
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off SET jit = off AS $$
DECLARE
    last_seq bigint := coalesce(pg_sequence_last_value('outbox_seq'), 0);
    settled  boolean; seqs bigint[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    decided := 0;
    IF last_seq < after_seq THEN after_seq := 0; seen_seq := 0; END IF; -- outbox_seq went back: start over
    IF NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.seq > after_seq) THEN RETURN; END IF;
    -- Every seq up to seen_seq shows once the transactions that held an
    -- aggregate's lock when it was read have ended.
    settled := seen_seq > after_seq AND NOT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY (seen_holders));
    -- Lowest seq first: an aggregate's rows show in seq order, so every row
    -- of an aggregate below one taken is taken too, or was decided before.
    seqs := ARRAY(SELECT s.seq FROM outbox_sequenced AS s WHERE s.seq > after_seq ORDER BY s.seq LIMIT max_rows);
    IF cardinality(seqs) > 0 THEN
        PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox_sequenced AS s
                                               JOIN outbox AS u ON u.id = s.message_id WHERE s.seq = ANY (seqs)));
        -- Read after the locks: p is the aggregate's latest decided row below.
        -- A row is its aggregate's head when it is the first undelivered one
        -- taken and every row before it is done or skipped.
        WITH taken AS (
            DELETE FROM outbox_sequenced AS s WHERE s.seq = ANY (seqs) RETURNING s.seq, s.message_id
        ), b AS (
            SELECT u.id, u.aggregate_id, t.seq, lag(t.seq) OVER w AS before,
                   u.status IN ('pending', 'processing', 'dead')
                     AND count(*) FILTER (WHERE u.status IN ('pending', 'processing', 'dead')) OVER a = 0 AS first,
                   max(t.seq) FILTER (WHERE u.status = 'done') OVER a AS delivered
              FROM taken AS t JOIN outbox AS u ON u.id = t.message_id
             WHERE u.ordered AND u.seq IS NULL
            WINDOW w AS (PARTITION BY u.aggregate_id ORDER BY t.seq),
                   a AS (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        ), d AS (
            SELECT b.id, b.seq, coalesce(b.before, p.seq) AS prev_seq,
                   b.first AND (p.seq IS NULL OR p.status IN ('done', 'skipped')) AS head,
                   coalesce(b.delivered, CASE WHEN p.status = 'done' THEN p.seq ELSE p.sent_seq END) AS sent_seq
              FROM b
              LEFT JOIN LATERAL (
                    SELECT q.seq, q.status, q.sent_seq
                      FROM outbox AS q
                     WHERE q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = b.aggregate_id AND q.seq < b.seq
                     ORDER BY q.aggregate_id, q.seq DESC LIMIT 1) AS p ON true
        )
        UPDATE outbox AS o
           SET seq = d.seq, prev_seq = d.prev_seq, head = d.head,
               sent_seq = CASE WHEN d.head THEN d.sent_seq END, txid = pg_current_xact_id()
          FROM d
         WHERE o.id = d.id;
        GET DIAGNOSTICS decided = ROW_COUNT;
    END IF;
    -- The floor passes seen_seq once every row up to it was taken.
    IF settled AND (cardinality(seqs) < max_rows OR seqs[max_rows] >= seen_seq) THEN
        after_seq := seen_seq;
    END IF;
    seen_seq := last_seq;
    seen_holders := ARRAY(SELECT l.virtualtransaction FROM pg_catalog.pg_locks AS l
                           WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = 'outbox'::regclass::oid
                             AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
                             AND l.pid <> pg_backend_pid());
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER AS $$
    SELECT d.decided FROM outbox_decide_committed(max_rows, 0, 0, '{}') AS d;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off SET jit = off AS $$
DECLARE
    ids bigint[]; top bigint; n integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL
                    AND NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.seq > 0 AND s.message_id = u.id)
                  ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN RETURN 0; END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    -- The rows go after every row their aggregates already have, even when
    -- outbox_seq is behind them (a copy that did not carry it).
    top := (SELECT max(l.seq)
              FROM (SELECT DISTINCT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)) AS a
             CROSS JOIN LATERAL (SELECT p.seq FROM outbox AS p
                                  WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
                                  ORDER BY p.aggregate_id, p.seq DESC LIMIT 1) AS l);
    IF top >= outbox_sequence_next('outbox_seq') THEN
        PERFORM setval('outbox_seq', top);
    END IF;
    INSERT INTO outbox_sequenced (seq, message_id)
    SELECT nextval('outbox_seq'), m.id
      FROM (SELECT u.id FROM outbox AS u
             WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
               AND NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.seq > 0 AND s.message_id = u.id)
             ORDER BY u.id) AS m;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_sequences(check_only boolean, scan_all boolean) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    ids regclass := pg_get_serial_sequence('outbox', 'id')::regclass;
    top_id bigint; top_seq bigint; next_id bigint; behind integer := 0;
BEGIN
    -- The rows first, the sequences after: a sequence only moves forward, so
    -- a value read after the rows is never behind them unless it really is.
    top_id := (SELECT max(o.id) FROM outbox AS o);
    top_seq := (SELECT max(r.seq) FROM (SELECT o.seq, o.ordered FROM outbox AS o ORDER BY o.id DESC LIMIT 1000) AS r
                 WHERE r.ordered);
    IF scan_all OR top_seq >= outbox_sequence_next('outbox_seq') THEN
        top_seq := (SELECT max(o.seq) FROM outbox AS o WHERE o.ordered);
    END IF;
    top_seq := greatest(top_seq, (SELECT max(s.seq) FROM outbox_sequenced AS s));
    next_id := outbox_sequence_next(ids);
    IF top_id >= next_id THEN
        behind := behind + 1;
        IF NOT check_only THEN PERFORM setval(ids, greatest(top_id, outbox_sequence_next(ids) - 1)); END IF;
    END IF;
    IF top_seq >= outbox_sequence_next('outbox_seq') THEN
        behind := behind + 1;
        IF NOT check_only THEN PERFORM setval('outbox_seq', greatest(top_seq, outbox_sequence_next('outbox_seq') - 1)); END IF;
    END IF;
    RETURN behind;
END;
$$;
-- +goose StatementEnd

-- CREATE OR REPLACE resets a function's settings: pin search_path again.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = 'outbox'::regclass);
    f   regproc;
BEGIN
    FOREACH f IN ARRAY ARRAY['outbox_commit_order'::regproc, 'outbox_decide_committed'::regproc,
            'outbox_resolve_heads'::regproc, 'outbox_repair_unsequenced'::regproc,
            'outbox_repair_sequences'::regproc] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, nsp);
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    from_key text := 'outbox.seq_from_' || TG_RELID;
    from_id  bigint := nullif(current_setting(from_key, true), '')::bigint;
    to_id    bigint := nullif(current_setting('outbox.seq_to_' || TG_RELID, true), '')::bigint;
    decide   boolean := current_setting('transaction_isolation') = 'read committed';
BEGIN
    PERFORM set_config(from_key, '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        -- One ordered row (NEW, the one that queued this run).
        PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
        UPDATE outbox AS o
           SET seq      = nextval('outbox_seq'),
               prev_seq = CASE WHEN decide THEN p.seq END,
               head     = CASE WHEN decide THEN p.seq IS NULL OR p.status IN ('done', 'skipped') END,
               sent_seq = CASE WHEN decide AND (p.seq IS NULL OR p.status IN ('done', 'skipped'))
                               THEN CASE WHEN p.status = 'done' THEN p.seq ELSE p.sent_seq END END
          FROM (SELECT 1) AS one
          LEFT JOIN (SELECT q.seq, q.status, q.sent_seq
                       FROM outbox AS q
                      WHERE q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = NEW.aggregate_id
                      ORDER BY q.aggregate_id, q.seq DESC LIMIT 1) AS p ON true
         WHERE o.id = NEW.id AND o.seq IS NULL;
        RETURN NULL;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u
                                          WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL));
    -- nextval is evaluated after the ORDER BY of its own subquery level.
    UPDATE outbox AS o
       SET seq      = s.seq,
           prev_seq = CASE WHEN s.before IS NOT NULL THEN s.before WHEN decide THEN p.seq END,
           head     = CASE WHEN s.before IS NOT NULL THEN false
                           WHEN decide THEN p.seq IS NULL OR p.status IN ('done', 'skipped') END,
           sent_seq = CASE WHEN s.before IS NULL AND decide AND (p.seq IS NULL OR p.status IN ('done', 'skipped'))
                           THEN CASE WHEN p.status = 'done' THEN p.seq ELSE p.sent_seq END END
      FROM (SELECT n.id, n.aggregate_id, n.seq,
                   lag(n.seq) OVER (PARTITION BY n.aggregate_id ORDER BY n.seq) AS before
              FROM (SELECT m.id, m.aggregate_id, nextval('outbox_seq') AS seq
                      FROM (SELECT u.id, u.aggregate_id
                              FROM outbox AS u
                             WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                             ORDER BY u.id) AS m) AS n) AS s
      LEFT JOIN LATERAL (
            SELECT q.seq, q.status, q.sent_seq
              FROM outbox AS q
             WHERE s.before IS NULL AND q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = s.aggregate_id
             ORDER BY q.aggregate_id, q.seq DESC LIMIT 1) AS p ON true
     WHERE o.id = s.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    ids bigint[]; n integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    SELECT array_agg(u.id) INTO ids
      FROM (SELECT u.id FROM outbox AS u WHERE u.ordered AND u.head IS NULL AND u.seq IS NOT NULL
             ORDER BY u.id LIMIT max_rows) AS u;
    IF ids IS NULL THEN RETURN 0; END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    UPDATE outbox AS o
       SET head     = (d.prev_seq IS NULL OR d.prev_status IN ('done', 'skipped')),
           prev_seq = d.prev_seq,
           sent_seq = CASE WHEN d.prev_seq IS NULL THEN NULL
                           WHEN d.prev_status = 'done' THEN d.prev_seq
                           WHEN d.prev_status = 'skipped' THEN d.prev_sent END,
           txid     = pg_current_xact_id()
      FROM (SELECT u.id, p.seq AS prev_seq, p.status AS prev_status, p.sent_seq AS prev_sent
              FROM outbox AS u
              LEFT JOIN LATERAL (
                    SELECT p.seq, p.status, p.sent_seq
                      FROM outbox AS p
                     WHERE p.ordered AND p.seq IS NOT NULL
                       AND p.aggregate_id = u.aggregate_id AND p.seq < u.seq
                     ORDER BY p.aggregate_id, p.seq DESC LIMIT 1) AS p ON true
             WHERE u.id = ANY (ids)) AS d
     WHERE o.id = d.id AND o.head IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    ids bigint[]; a record; prev record;
    heads bigint[] := '{}'; aggs text[] := '{}'; last_seqs bigint[] := '{}'; last_sent bigint[] := '{}';
    top bigint := 0; n integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN RETURN 0; END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    FOR a IN SELECT u.aggregate_id, min(u.id) FILTER (WHERE u.status NOT IN ('done', 'skipped')) AS first_id
               FROM outbox AS u WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL GROUP BY u.aggregate_id
    LOOP
        SELECT p.id, p.status, p.seq, p.sent_seq INTO prev
          FROM outbox AS p WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC LIMIT 1;
        IF FOUND THEN
            top := greatest(top, prev.seq);
            aggs := aggs || a.aggregate_id;
            last_seqs := last_seqs || prev.seq;
            last_sent := last_sent || CASE WHEN prev.status = 'done' THEN prev.seq ELSE prev.sent_seq END;
        END IF;
        IF a.first_id IS NOT NULL AND (NOT FOUND OR prev.status IN ('done', 'skipped')) THEN
            heads := heads || a.first_id;
        END IF;
    END LOOP;
    -- The rows go after every row their aggregates have, even when
    -- outbox_seq is behind them (a copy that did not carry it).
    IF top >= outbox_sequence_next('outbox_seq') THEN
        PERFORM setval('outbox_seq', top);
    END IF;
    UPDATE outbox AS o
       SET seq      = s.seq,
           prev_seq = coalesce(s.before, l.last_seq),
           head     = o.id = ANY (heads),
           sent_seq = CASE WHEN o.id = ANY (heads) THEN coalesce(s.delivered, l.last_sent) END,
           txid     = pg_current_xact_id()
      FROM (SELECT n.id, n.aggregate_id, n.seq,
                   lag(n.seq) OVER w AS before,
                   max(n.seq) FILTER (WHERE n.status = 'done') OVER w AS delivered
              FROM (SELECT m.id, m.aggregate_id, m.status, nextval('outbox_seq') AS seq
                      FROM (SELECT u.id, u.aggregate_id, u.status
                              FROM outbox AS u
                             WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
                             ORDER BY u.id) AS m) AS n
            WINDOW w AS (PARTITION BY n.aggregate_id ORDER BY n.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS s
      LEFT JOIN unnest(aggs, last_seqs, last_sent) AS l (aggregate_id, last_seq, last_sent)
             ON l.aggregate_id = s.aggregate_id
     WHERE o.id = s.id AND o.seq IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_sequences(check_only boolean, scan_all boolean) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    ids regclass := pg_get_serial_sequence('outbox', 'id')::regclass;
    top_id bigint; top_seq bigint; next_id bigint; behind integer := 0;
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
        IF NOT check_only THEN PERFORM setval(ids, greatest(top_id, outbox_sequence_next(ids) - 1)); END IF;
    END IF;
    IF top_seq >= outbox_sequence_next('outbox_seq') THEN
        behind := behind + 1;
        IF NOT check_only THEN PERFORM setval('outbox_seq', greatest(top_seq, outbox_sequence_next('outbox_seq') - 1)); END IF;
    END IF;
    RETURN behind;
END;
$$;
-- +goose StatementEnd

-- CREATE OR REPLACE resets a function's settings: pin search_path again.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = 'outbox'::regclass);
    f   regproc;
BEGIN
    FOREACH f IN ARRAY ARRAY['outbox_commit_order'::regproc, 'outbox_resolve_heads'::regproc,
            'outbox_repair_unsequenced'::regproc, 'outbox_repair_sequences'::regproc] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, nsp);
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- Rows not decided yet get their seq back in place, undecided (head NULL):
-- the previous version's outbox_resolve_heads decides them.
UPDATE outbox AS o
   SET seq = s.seq, head = NULL, txid = pg_current_xact_id()
  FROM outbox_sequenced AS s
 WHERE o.id = s.message_id AND o.seq IS NULL;
DROP TABLE outbox_sequenced;
DROP FUNCTION outbox_decide_committed(integer, bigint, bigint, text[]);
