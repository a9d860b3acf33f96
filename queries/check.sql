-- The start check of the dispatcher and of every pgoutbox command: is the
-- outbox table there as the queries need it? It reads only the catalogs, so
-- it works whoever applied the migrations and with whatever goose version
-- table.

-- OutboxCheckTable resolves @relation (table or schema.table) as this
-- session does, and returns its name as regclass text ('' when it does not
-- resolve), its schema and table names as stored (unquoted; '' when it does
-- not resolve: the table identity the default CloudEvents source is built
-- from, whatever search_path or flags named it), the search_path seen, its
-- columns, whether the table @history_name (the attempt history, migration
-- 00011) is in its schema, and every schema.table named @table_name (to say
-- where a table is when it is not found).
-- Lock strategy: none (catalog reads, no lock on the table).
-- Index: pg_class and pg_attribute catalog indexes (oid, attrelid, relname).
-- 0 rows: never; one row always.
-- name: OutboxCheckTable :one
SELECT coalesce(c.oid::regclass::text, '')::text AS relation,
       coalesce((SELECT n.nspname::text FROM pg_catalog.pg_namespace n WHERE n.oid = c.relnamespace), '')::text AS schema_name,
       coalesce(c.relname::text, '')::text AS resolved_table,
       current_setting('search_path')::text AS search_path,
       coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum)
                   FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}')::text[] AS columns,
       EXISTS (SELECT 1 FROM pg_catalog.pg_class h
                WHERE h.relname = @history_name::text AND h.relnamespace = c.relnamespace AND h.relkind IN ('r', 'p')) AS has_history,
       coalesce((SELECT array_agg(n.nspname::text || '.' || k.relname::text ORDER BY n.nspname)
                   FROM pg_catalog.pg_class k JOIN pg_catalog.pg_namespace n ON n.oid = k.relnamespace
                  WHERE k.relname = @table_name::text AND k.relkind IN ('r', 'p')), '{}')::text[] AS elsewhere
  FROM (SELECT to_regclass(@relation::text) AS oid) t
  LEFT JOIN pg_catalog.pg_class c ON c.oid = t.oid;
