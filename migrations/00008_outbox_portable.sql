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
END;
$$;
-- +goose StatementEnd

-- +goose Down
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
