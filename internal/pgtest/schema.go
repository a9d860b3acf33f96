package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaObjects describes every object of schema (the relations whose
// names start with skip, such as a version table, aside) as sorted lines: relations with their storage options,
// columns in order with type, nullability, default and identity,
// constraints, indexes, triggers, sequences with their parameters and
// owner, functions with their signature, settings and body, and comments.
// Function bodies are compared without their -- comments and with runs of
// white space as one space (none after an opening or before a closing
// parenthesis), so schema.sql may lay them out more tightly.
func SchemaObjects(t testing.TB, pool *pgxpool.Pool, schema, skip string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
WITH rel AS (
    SELECT c.oid, c.relname, c.relkind FROM pg_class AS c
     WHERE c.relnamespace = $2::regnamespace
       AND c.relname NOT LIKE $1 || '%'
)
SELECT format('relation %s %s %s', c.relname, c.relkind, c.reloptions)
  FROM rel JOIN pg_class AS c USING (oid)
UNION ALL
SELECT format('column %s.%s #%s %s notnull=%s default=%s identity=%s', r.relname, a.attname,
              rank() OVER (PARTITION BY a.attrelid ORDER BY a.attnum), format_type(a.atttypid, a.atttypmod),
              a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity)
  FROM rel AS r JOIN pg_attribute AS a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE r.relkind = 'r'
UNION ALL
SELECT format('constraint %s.%s %s validated=%s', r.relname, k.conname, pg_get_constraintdef(k.oid), k.convalidated)
  FROM rel AS r JOIN pg_constraint AS k ON k.conrelid = r.oid
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM rel AS r JOIN pg_index AS i ON i.indrelid = r.oid
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(g.oid) FROM rel AS r JOIN pg_trigger AS g ON g.tgrelid = r.oid AND NOT g.tgisinternal
UNION ALL
SELECT format('sequence %s %s start=%s inc=%s min=%s max=%s cache=%s cycle=%s owned=%s', r.relname,
              format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
              (SELECT d.refobjid::regclass || '.' || a.attname FROM pg_depend AS d
                 JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                WHERE d.classid = 'pg_class'::regclass AND d.objid = r.oid AND d.deptype IN ('a', 'i')))
  FROM rel AS r JOIN pg_sequence AS s ON s.seqrelid = r.oid
UNION ALL
SELECT format('function %s(%s) returns %s lang=%s secdef=%s volatile=%s strict=%s config=%s body=%s', p.proname,
              pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid), l.lanname, p.prosecdef,
              p.provolatile, p.proisstrict, p.proconfig,
              regexp_replace(regexp_replace(btrim(regexp_replace(regexp_replace(p.prosrc, '--[^\n]*', '', 'g'),
                             '\s+', ' ', 'g')), '\( ', '(', 'g'), ' \)', ')', 'g'))
  FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
 WHERE p.pronamespace = $2::regnamespace
UNION ALL
SELECT format('comment %s %s', d.objoid::regclass, d.description) FROM pg_description AS d JOIN rel AS r ON r.oid = d.objoid
ORDER BY 1`, skip, schema)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
