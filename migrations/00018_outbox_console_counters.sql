-- pgoutbox-migration: 00018_outbox_console_counters.sql
-- +goose Up
-- outbox_delivered: the deliveries of each recent minute, kept as counters
-- in the same statement that changes the rows, so the console's throughput
-- chart and "delivered in the charted hour" read a few counter rows instead
-- of counting every done row of the hour (after a backlog is drained that
-- is millions of index entries: 1.2 s for 2 million).
--
-- The counters equal the table: for every minute of the last two hours,
-- the sum of its rows is the number of done rows whose done_at falls in it,
-- in any snapshot, because every change of a row into or out of 'done'
-- (finalize, redelivery, purge, TRUNCATE) changes them in the same
-- statement. Nothing is written on the producers' INSERT: the triggers
-- fire on UPDATEs that set status or done_at, on DELETE and TRUNCATE only
-- (producers insert pending rows; PostgreSQL skips a column trigger whose
-- columns an UPDATE does not set, so the producers' commit-time UPDATE of
-- ordered rows does not see them either).
--
-- How: a row trigger, whose WHEN passes only rows that enter or leave
-- 'done' (or a done row whose done_at changes), adds +1/-1 to a
-- transaction-local tally (a setting, one entry per minute); a statement
-- trigger then writes the tally in one upsert per minute into the rows of
-- its own backend (backend = pg_backend_pid()). So a finalize of 100
-- messages writes one counter row, and relays (each connection its own
-- row) never wait for each other's counters; readers sum the rows of a
-- minute. A claim (it sets status) pays for the WHEN test of its rows and
-- one call that finds the tally empty. A row becoming done costs its
-- finalize about 7 microseconds of backend CPU (measured: a 100-row UPDATE
-- to done, 1,000 of them in autocommit, 1.1-1.3 ms each without the
-- triggers, 1.8-2.6 ms with them, on a shared 2-core machine).
--
-- Bounded: minutes older than two hours are not written and are deleted
-- (by whichever writer starts a new minute, skipping rows another holds);
-- the table holds at most 120 minutes x the connections that changed done
-- rows in them. A delete of old done rows (pgoutbox purge) reads its
-- deleted rows once more to find recent ones (there are none unless the
-- retention is under two hours).
--
-- Not counted: rows inserted already done (a restore with pg_restore
-- --data-only, COPY, logical replication, which runs with triggers off) and
-- changes made with triggers disabled (session_replication_role =
-- replica). After such a load, SELECT outbox_delivered_rebuild() recounts
-- the last two hours from the table (it locks the table against writes
-- meanwhile; one index range scan of the done rows of two hours).
--
-- Cost of this migration: the recount below, under the lock CREATE TRIGGER
-- takes (producers and relays wait for it): one range scan of the done
-- rows of the last two hours.
CREATE TABLE outbox_delivered (
    minute    timestamptz NOT NULL,
    backend   integer NOT NULL,
    delivered bigint NOT NULL,
    PRIMARY KEY (minute, backend)
);

-- outbox_delivered_tally: for each row entering or leaving 'done', +1 or -1
-- on the minute of its done_at, in the setting pgoutbox.delivered_<table
-- oid> (local to the transaction): 'minute:count' entries, space
-- separated, minutes as epoch seconds / 60. A statement's rows share their
-- done_at (now()), so a row becoming done nearly always adds 1 to the
-- first entry. It calls built-in functions only, so it needs no
-- search_path of its own (setting and restoring one costs each call, as
-- 00016 measured).
-- +goose StatementBegin
CREATE FUNCTION outbox_delivered_tally() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    name  text := 'pgoutbox.delivered_' || TG_RELID;
    tally text := coalesce(current_setting(name, true), '');
    head  text;
    entry text;
BEGIN
    IF OLD.status = 'done' AND OLD.done_at IS NOT NULL THEN
        -- Rare (a redelivery, a done_at changed): -1 on the old minute, +1
        -- on the new one if the row stays done, each an entry of its own.
        tally := (extract(epoch FROM date_trunc('minute', OLD.done_at))::bigint / 60) || ':-1'
                 || CASE WHEN NEW.status = 'done' AND NEW.done_at IS NOT NULL
                         THEN ' ' || (extract(epoch FROM date_trunc('minute', NEW.done_at))::bigint / 60) || ':1'
                         ELSE '' END
                 || CASE WHEN tally = '' THEN '' ELSE ' ' || tally END;
    ELSE
        -- A row becomes done: +1 on the first entry when it is the row's
        -- minute, else a new first entry.
        entry := (extract(epoch FROM date_trunc('minute', NEW.done_at))::bigint / 60) || ':';
        head := split_part(tally, ' ', 1);
        IF starts_with(head, entry) THEN
            tally := entry || (substr(head, length(entry) + 1)::bigint + 1) || substr(tally, length(head) + 1);
        ELSE
            tally := entry || '1' || CASE WHEN tally = '' THEN '' ELSE ' ' || tally END;
        END IF;
    END IF;
    PERFORM set_config(name, tally, true);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- outbox_delivered_add: adds deltas per minute to this backend's counter
-- rows, minutes older than two hours left out; a writer that starts a
-- minute deletes the counters older than two hours that nobody holds. It
-- runs as the table owner (SECURITY DEFINER), as outbox_delivered_truncated does, so
-- relays and operators need no grant on outbox_delivered to write it.
-- +goose StatementBegin
CREATE FUNCTION outbox_delivered_add(minutes timestamptz[], deltas bigint[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    keep    timestamptz := date_trunc('minute', now()) - interval '2 hours';
    started boolean;
BEGIN
    WITH d AS (
        SELECT u.minute, sum(u.delta) AS delta
          FROM unnest(minutes, deltas) AS u (minute, delta)
         WHERE u.minute >= keep
         GROUP BY u.minute
        HAVING sum(u.delta) <> 0
    ), up AS (
        INSERT INTO outbox_delivered AS c (minute, backend, delivered)
        SELECT d.minute, pg_backend_pid(), d.delta FROM d
        ON CONFLICT (minute, backend) DO UPDATE SET delivered = c.delivered + excluded.delivered
        RETURNING (c.xmax = 0) AS inserted
    )
    SELECT coalesce(bool_or(up.inserted), false) INTO started FROM up;
    IF started THEN
        DELETE FROM outbox_delivered AS c
         WHERE c.ctid = ANY (ARRAY(SELECT o.ctid
                                     FROM outbox_delivered AS o
                                    WHERE o.minute < keep
                                      FOR UPDATE SKIP LOCKED));
    END IF;
END;
$$;
-- +goose StatementEnd

-- outbox_delivered_flush: once per UPDATE statement that sets status or
-- done_at, the tally of its rows into the counters.
-- +goose StatementBegin
CREATE FUNCTION outbox_delivered_flush() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    name  text := 'pgoutbox.delivered_' || TG_RELID;
    tally text := current_setting(name, true);
BEGIN
    IF tally IS NULL OR tally = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config(name, '', true);
    PERFORM outbox_delivered_add(
        ARRAY(SELECT to_timestamp(split_part(e, ':', 1)::bigint * 60) FROM unnest(string_to_array(tally, ' ')) WITH ORDINALITY AS t (e, n) ORDER BY n),
        ARRAY(SELECT split_part(e, ':', 2)::bigint FROM unnest(string_to_array(tally, ' ')) WITH ORDINALITY AS t (e, n) ORDER BY n));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- outbox_delivered_deleted: a DELETE's done rows leave their minutes.
-- +goose StatementBegin
CREATE FUNCTION outbox_delivered_deleted() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    keep timestamptz := date_trunc('minute', now()) - interval '2 hours';
BEGIN
    PERFORM outbox_delivered_add(array_agg(g.minute), array_agg(-g.n))
       FROM (SELECT date_trunc('minute', o.done_at) AS minute, count(*) AS n
               FROM gone AS o
              WHERE o.status = 'done' AND o.done_at >= keep
              GROUP BY 1) AS g
     HAVING count(*) > 0;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outbox_delivered_truncated() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM outbox_delivered;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- outbox_delivered_rebuild: the counters recounted from the table (the
-- done rows of the last two hours, by minute), under a lock that keeps
-- writers out meanwhile (SHARE ROW EXCLUSIVE, as CREATE TRIGGER takes:
-- reads go on). For after a load that bypassed the triggers. Returns the
-- deliveries counted.
-- +goose StatementBegin
CREATE FUNCTION outbox_delivered_rebuild() RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    LOCK TABLE outbox IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM outbox_delivered;
    INSERT INTO outbox_delivered (minute, backend, delivered)
    SELECT date_trunc('minute', o.done_at), 0, count(*)
      FROM outbox AS o
     WHERE o.status = 'done'
       AND o.done_at >= date_trunc('minute', now()) - interval '2 hours'
     GROUP BY 1;
    SELECT coalesce(sum(delivered), 0) INTO n FROM outbox_delivered;
    RETURN n;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_delivered_tally
    AFTER UPDATE OF status, done_at ON outbox
    FOR EACH ROW
    WHEN (((OLD.status = 'done' AND OLD.done_at IS NOT NULL) OR (NEW.status = 'done' AND NEW.done_at IS NOT NULL))
          AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.done_at IS DISTINCT FROM NEW.done_at))
    EXECUTE FUNCTION outbox_delivered_tally();

CREATE TRIGGER outbox_delivered_flush
    AFTER UPDATE OF status, done_at ON outbox
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_delivered_flush();

CREATE TRIGGER outbox_delivered_deleted
    AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_delivered_deleted();

CREATE TRIGGER outbox_delivered_truncated
    AFTER TRUNCATE ON outbox
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_delivered_truncated();

-- Every function above but outbox_delivered_tally runs with the search_path
-- pinned to the table's schema (pg_temp last), as 00004 explains.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s(timestamptz[], bigint[]) SET search_path = %I, pg_catalog, pg_temp', 'outbox_delivered_add'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp', 'outbox_delivered_flush'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp', 'outbox_delivered_deleted'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp', 'outbox_delivered_truncated'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp', 'outbox_delivered_rebuild'::regproc, nsp);
END;
$$;
-- +goose StatementEnd

-- Whoever may read the outbox may read its counters (the console reads
-- them; docs/roles.sql grants it to pgoutbox_relay on a new install).
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
        EXECUTE format('GRANT SELECT ON %s TO %s', 'outbox_delivered'::regclass, r.grantee);
    END LOOP;
END;
$$;
-- +goose StatementEnd

SELECT outbox_delivered_rebuild();

-- +goose Down
DROP TRIGGER outbox_delivered_truncated ON outbox;
DROP TRIGGER outbox_delivered_deleted ON outbox;
DROP TRIGGER outbox_delivered_flush ON outbox;
DROP TRIGGER outbox_delivered_tally ON outbox;
DROP FUNCTION outbox_delivered_rebuild();
DROP FUNCTION outbox_delivered_truncated();
DROP FUNCTION outbox_delivered_deleted();
DROP FUNCTION outbox_delivered_flush();
DROP FUNCTION outbox_delivered_add(timestamptz[], bigint[]);
DROP FUNCTION outbox_delivered_tally();
DROP TABLE outbox_delivered;
