-- pgoutbox-migration: 00009_outbox_skipped.sql
-- +goose Up
-- Skipped is an outcome of its own. A dead message that an operator resolves
-- without delivering it (`pgoutbox dead skip`, the console's Skip) becomes
-- status 'skipped', no longer 'done': it never counts as delivered (stats,
-- the console, the metrics and retention keep it apart), while it unblocks
-- its aggregate exactly as a delivered message does. done_at is when it was
-- resolved. Messages skipped before this migration (done, with last_error
-- starting "skipped:") become skipped.
--
-- The status check allows the new value; the head decisions (at COMMIT, in
-- the relay's recovery lane, in the repair of unsequenced rows) treat a
-- skipped predecessor as resolved, and the head hand-off fires when a head
-- becomes done or skipped.
-- +goose StatementBegin
DO $$
DECLARE
    c name;
BEGIN
    FOR c IN SELECT k.conname
               FROM pg_catalog.pg_constraint AS k
              WHERE k.conrelid = 'outbox'::regclass
                AND k.contype = 'c'
                AND pg_catalog.pg_get_constraintdef(k.oid) LIKE '%status%''pending''%''dead''%'
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', 'outbox'::regclass, c);
    END LOOP;
END;
$$;
-- +goose StatementEnd
ALTER TABLE outbox ADD CONSTRAINT outbox_status_allowed
    CHECK (status IN ('pending', 'processing', 'done', 'dead', 'skipped'));

UPDATE outbox
   SET status = 'skipped'
 WHERE status = 'done'
   AND last_error LIKE 'skipped:%';

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
        IF NOT FOUND OR prev.status IN ('done', 'skipped') THEN
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
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
    FOR a IN SELECT u.aggregate_id, min(u.id) FILTER (WHERE u.status NOT IN ('done', 'skipped')) AS first_id
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
       SET head = (d.prev_id IS NULL OR d.prev_status IN ('done', 'skipped')),
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

DROP TRIGGER outbox_head_handoff ON outbox;
CREATE TRIGGER outbox_head_handoff
    AFTER UPDATE ON outbox
    FOR EACH ROW
    WHEN (OLD.ordered AND OLD.head AND NEW.status IN ('done', 'skipped') AND OLD.status NOT IN ('done', 'skipped'))
    EXECUTE FUNCTION outbox_head_handoff();

-- CREATE OR REPLACE resets a function's settings: the search_path is pinned
-- to the table's schema again, as 00004 explains.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_repair_unsequenced'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_resolve_heads'::regproc, nsp);
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- Skipped messages become done again (their last_error still says why);
-- the functions keep reading 'skipped' as resolved, which changes nothing
-- once no row can have it.
DROP TRIGGER outbox_head_handoff ON outbox;
UPDATE outbox SET status = 'done' WHERE status = 'skipped';
CREATE TRIGGER outbox_head_handoff
    AFTER UPDATE ON outbox
    FOR EACH ROW
    WHEN (OLD.ordered AND OLD.head AND NEW.status = 'done' AND OLD.status <> 'done')
    EXECUTE FUNCTION outbox_head_handoff();
ALTER TABLE outbox DROP CONSTRAINT outbox_status_allowed;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('pending', 'processing', 'done', 'dead'));
