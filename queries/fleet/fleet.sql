-- The fleet's reads of a server's catalogs (package fleet): which databases
-- to serve, which of them had inserts since the last look, and whether a
-- database accepts writes. They read no outbox table.

-- FleetListDatabases lists the databases of the server whose name matches
-- the SQL LIKE @pattern, leaving out templates and databases that do not
-- allow connections (`pgoutbox run --discover-databases`).
-- Lock strategy: none (reads the pg_database catalog).
-- Index: none: the catalog is one small table per server.
-- No rows: no database matches.
-- name: FleetListDatabases :many
SELECT datname::text AS datname
  FROM pg_catalog.pg_database
 WHERE datallowconn
   AND NOT datistemplate
   AND datname LIKE @pattern::text
 ORDER BY datname;

-- FleetInsertCounts reads each database's count of inserted rows from the
-- statistics: a database whose count moved since the last look may have new
-- events, so the fleet's wake-up polls it first.
-- Lock strategy: none (reads the statistics view pg_stat_database).
-- Index: none: one row per database, from the statistics collector.
-- No rows: the server reports no database statistics.
-- name: FleetInsertCounts :many
SELECT datname::text AS datname, coalesce(tup_inserted, 0)::bigint AS tup_inserted
  FROM pg_catalog.pg_stat_database
 WHERE datname IS NOT NULL;

-- FleetWritable reads whether the database accepts writes: a standby (in
-- recovery) or default_transaction_read_only = on cannot be served.
-- Lock strategy: none (calls two functions; reads no table).
-- Index: none (no table read).
-- Always one row.
-- name: FleetWritable :one
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
       pg_catalog.current_setting('default_transaction_read_only')::text AS read_only;
