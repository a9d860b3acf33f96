-- pgoutbox-migration: 00018_outbox_console_counters.sql
-- +goose Up
-- outbox_delivered: the deliveries of each recent minute, as counters the
-- relay keeps, so the console's throughput chart and "delivered in the
-- charted hour" read a few counter rows instead of counting every done row
-- of the hour (after a backlog is drained that is millions of index
-- entries: 1.2 s for 2 million).
--
-- The statements that make rows done or stop them being done write the
-- counters themselves, in the same statement, through outbox_delivered_add:
-- the relay's finalizes (OutboxMarkDoneMany, OutboxFinalizeMany,
-- OutboxMarkDone) add the rows they made done to the current minute, one
-- upsert per statement; a redelivery (OutboxRedeliverDone) and a purge
-- (OutboxPurgeDone) take their rows off the minutes of their done_at. So
-- the counters equal the table in any snapshot while rows change through
-- pgoutbox, and no trigger is added: producers' INSERTs and the relay's
-- claims do not see them. Each connection writes rows of its own
-- (backend = pg_backend_pid()), so relays never wait for each other's
-- counters; readers sum the rows of a minute.
--
-- Bounded: minutes older than two hours are not written and are deleted
-- (by whichever writer starts a new minute, skipping rows another holds);
-- the table holds at most 120 minutes x the connections that delivered in
-- them.
--
-- Not counted: changes made outside pgoutbox's statements (an UPDATE,
-- DELETE or TRUNCATE by hand, rows loaded already done by a restore, COPY
-- or logical replication). After one, SELECT outbox_delivered_rebuild()
-- recounts the last two hours from the table (it locks the table against
-- writes meanwhile; one index range scan of the done rows of two hours).
--
-- Cost of this migration: that recount, under the same lock (producers and
-- relays wait for it): one range scan of the done rows of the last two
-- hours.
CREATE TABLE outbox_delivered (
    minute    timestamptz NOT NULL,
    backend   integer NOT NULL,
    delivered bigint NOT NULL,
    PRIMARY KEY (minute, backend)
);

-- outbox_delivered_add: adds deltas per minute to this backend's counter
-- rows, minutes older than two hours left out; a writer that starts a
-- minute deletes the counters older than two hours that nobody holds. It
-- runs as the table owner (SECURITY DEFINER), so relays and operators need
-- no grant on outbox_delivered to write it (an install upgraded with its
-- roles as they were keeps working).
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

-- outbox_delivered_rebuild: the counters recounted from the table (the
-- done rows of the last two hours, by minute), under a lock that keeps
-- writers out meanwhile (SHARE ROW EXCLUSIVE: reads go on). For after
-- changes made outside pgoutbox's statements (see above). Returns the
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

-- Both functions run with the search_path pinned to the table's schema
-- (pg_temp last), as 00004 explains.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s(timestamptz[], bigint[]) SET search_path = %I, pg_catalog, pg_temp', 'outbox_delivered_add'::regproc, nsp);
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
DROP FUNCTION outbox_delivered_rebuild();
DROP FUNCTION outbox_delivered_add(timestamptz[], bigint[]);
DROP TABLE outbox_delivered;
