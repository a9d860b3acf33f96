-- What `pgoutbox migrate status` reads when the table was migrated outside
-- pgoutbox's version table (through an application's own goose history, or
-- by hand): the schema objects the migrations create, and the goose version
-- tables of the database. Catalogs only, so it works whoever applied the
-- migrations.

-- OutboxSchemaObjects says, for each (@kinds[i], @names[i]) — kind one of
-- table, index, sequence, function, trigger, column, constraint — whether it
-- exists for the table @relation (as this session resolves it): relations
-- and functions in the table's schema, triggers, columns and constraints on
-- the table.
-- Lock strategy: none (catalog reads, no lock on the table).
-- Index: pg_class, pg_attribute, pg_trigger, pg_proc and pg_constraint
-- catalog indexes.
-- 0 rows: @relation does not resolve to a table.
-- name: OutboxSchemaObjects :many
SELECT o.kind::text AS kind, o.name::text AS name,
       (CASE o.kind
         WHEN 'column' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                                     WHERE a.attrelid = t.oid AND a.attname = o.name AND a.attnum > 0 AND NOT a.attisdropped)
         WHEN 'trigger' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g
                                      WHERE g.tgrelid = t.oid AND g.tgname = o.name AND NOT g.tgisinternal)
         WHEN 'constraint' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                                         WHERE k.conrelid = t.oid AND k.conname = o.name)
         WHEN 'function' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                                       WHERE p.proname = o.name AND p.pronamespace = t.relnamespace)
         ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                       WHERE c.relname = o.name AND c.relnamespace = t.relnamespace)
       END)::boolean AS present
  FROM (SELECT unnest(@kinds::text[]) AS kind, unnest(@names::text[]) AS name) o
 CROSS JOIN (SELECT c.oid, c.relnamespace FROM pg_catalog.pg_class c
              WHERE c.oid = to_regclass(@relation::text)) t;

-- OutboxGooseVersionTables lists the tables shaped like goose's version
-- table (version_id, is_applied, tstamp) in this database, schema-qualified:
-- the histories that may have applied the migrations.
-- Lock strategy: none (catalog reads).
-- Index: pg_attribute_relid_attnam_index per table.
-- 0 rows: no goose history in this database.
-- name: OutboxGooseVersionTables :many
SELECT (n.nspname || '.' || c.relname)::text AS version_table
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r'
   AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND (SELECT count(*) FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
           AND a.attname IN ('version_id', 'is_applied', 'tstamp')) = 3
 ORDER BY 1;
