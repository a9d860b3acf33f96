-- What pins the xmin horizon. Every row version the outbox deletes or
-- updates (each claim and finalize writes one) stays in the table and its
-- indexes until no snapshot that can see it remains; the oldest snapshot on
-- the server decides, whichever database or table it reads. These queries
-- name who holds it, so that an operator whose outbox slows down can ask the
-- right person to end the right thing. Read-only; catalog views only.

-- OutboxHorizonHolders: the holders of the oldest snapshots on the server,
-- oldest first (by the age, in transactions, of the xmin they hold):
-- * backend: a session with an open snapshot (pg_stat_activity.backend_xmin):
--   a long query, a REPEATABLE READ or SERIALIZABLE transaction (pg_dump), a
--   session idle in transaction. since is its transaction's start.
-- * standby: a walsender whose standby sends hot_standby_feedback (its
--   backend_xmin is the standby's oldest snapshot).
-- * replication slot: a slot's xmin (physical slots with feedback) or
--   catalog_xmin (logical slots; it holds back the system catalogs only).
-- * prepared transaction: a PREPARE TRANSACTION never committed or rolled
--   back; since is when it was prepared.
-- pid is 0 where there is no process (an inactive slot, a prepared
-- transaction). Sessions of other roles show their pid and xmin but no
-- user, state, start or query unless the reader has pg_read_all_stats.
-- held_seconds is now() - since on the database clock (0 when since is
-- unknown); xmin_age is age(xmin) in transactions (0 when the holder holds only a
-- catalog_xmin); query holds the first 80 characters of the session's
-- current or last statement, whitespace collapsed.
-- Lock strategy: none.
-- 0 rows: nothing holds a snapshot (an idle server).
-- name: OutboxHorizonHolders :many
SELECT h.kind::text AS kind,
       coalesce(h.pid, 0)::integer AS pid,
       coalesce(h.role, '')::text AS role,
       coalesce(h.name, '')::text AS name,
       coalesce(h.state, '')::text AS state,
       h.since AS since,
       coalesce(extract(epoch FROM now() - h.since), 0)::float8 AS held_seconds,
       (CASE WHEN h.xmin IS NULL THEN 0 ELSE age(h.xmin) END)::bigint AS xmin_age,
       (CASE WHEN h.catalog_xmin IS NULL THEN 0 ELSE age(h.catalog_xmin) END)::bigint AS catalog_xmin_age,
       coalesce(left(regexp_replace(h.query, '\s+', ' ', 'g'), 80), '')::text AS query
  FROM (
        SELECT CASE WHEN a.backend_type = 'walsender' THEN 'standby' ELSE 'backend' END AS kind,
               a.pid, a.usename::text AS role, a.application_name AS name, a.state,
               a.xact_start AS since, a.backend_xmin AS xmin, NULL::xid AS catalog_xmin, a.query
          FROM pg_catalog.pg_stat_activity AS a
         WHERE a.backend_xmin IS NOT NULL
           AND a.pid <> pg_backend_pid()
        UNION ALL
        SELECT 'replication slot', s.active_pid, NULL, s.slot_name::text,
               CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
               NULL, s.xmin, s.catalog_xmin, NULL
          FROM pg_catalog.pg_replication_slots AS s
         WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
        UNION ALL
        SELECT 'prepared transaction', NULL, p.owner::text, p.gid, 'prepared',
               p.prepared, p.transaction, NULL, NULL
          FROM pg_catalog.pg_prepared_xacts AS p
       ) AS h
 ORDER BY (CASE WHEN h.xmin IS NULL THEN 0 ELSE age(h.xmin) END) DESC,
          (CASE WHEN h.catalog_xmin IS NULL THEN 0 ELSE age(h.catalog_xmin) END) DESC
 LIMIT @max_rows::integer;

-- OutboxDeadTuples: what the outbox table carries that vacuum has not
-- removed yet, from the statistics collector (approximate, updated as
-- sessions report): dead and live row versions, and how long ago (auto)vacuum
-- last finished on it, database clock (-1: never since the statistics were
-- reset).
-- Lock strategy: none. Always one row (zeros before any statistics).
-- Index: none (one row of the statistics view pg_stat_user_tables; no table read).
-- name: OutboxDeadTuples :one
SELECT coalesce(s.n_dead_tup, 0)::bigint AS dead_tuples,
       coalesce(s.n_live_tup, 0)::bigint AS live_tuples,
       coalesce(extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum)), -1)::float8 AS vacuumed_seconds_ago
  FROM (SELECT 1) AS one
  LEFT JOIN pg_catalog.pg_stat_user_tables AS s ON s.relid = to_regclass('outbox');
