package cli

import (
	"context"
	"errors"
	"fmt"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/queries"
)

const initAbout = `Copies pgoutbox's SQL into your own sqlc project under another table name: the
goose migrations into DIR/migrations and the annotated queries into DIR/queries,
with the table outbox and everything derived from it renamed (indexes
outbox_pending -> NAME_pending, the trigger and its functions outbox_notify ->
NAME_notify, the trigger's flag 'outbox.wake_queued' ->
'NAME.wake_queued', the NOTIFY channel 'outbox' -> 'NAME', query names OutboxClaim ->
<CamelName>Claim). Only whole identifiers are renamed; the word "outbox" in
comment prose is kept. On stdout it prints the sqlc.yaml entry to add (paths
relative to --sqlc-root), with the type overrides pgoutbox uses (interval ->
time.Duration, timestamptz -> time.Time, sql_package pgx/v5).

NAME must match ^[a-z_][a-z0-9_]{0,62}$, must not be a reserved SQL key word
(PostgreSQL's reserved list: user, order, table, select, ...) nor start with
pg_, and every name derived from it must fit PostgreSQL's 63-byte limit.
Existing files are never overwritten unless --force.

The generated code is for your own producers and relay: the pgoutbox dispatcher
and the other pgoutbox commands work on the table outbox.`

const initExamples = `  pgoutbox init --table billing_outbox --dir internal/billing/outbox
  pgoutbox init --table billing_outbox --dir db/outbox --package outboxdb > sqlc.outbox.yaml
  pgoutbox init --table billing_outbox --dir ../svc/sql --sqlc-root ../svc --force`

var migrationFileRe = regexp.MustCompile(`^([0-9]+)_outbox((?:_[a-z0-9_]*)?)\.sql$`)

func (a *app) initCmd(_ context.Context, args []string) error {
	f := newFlags("init", "pgoutbox init --table NAME --dir DIR [flags]", initAbout, initExamples)
	table := f.String("table", "", "the table name to use instead of outbox (required)")
	dir := f.String("dir", "", "directory to write migrations/ and queries/ into (required)")
	pkg := f.String("package", "", "Go package name for the generated code in the printed sqlc entry (default: NAME without '_')")
	sqlcRoot := f.String("sqlc-root", ".", "directory of your sqlc.yaml: paths in the printed entry are relative to it")
	force := f.Bool("force", false, "overwrite existing files")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if err := validateTable(*table); err != nil {
		return f.usageError("%v", err)
	}
	if *dir == "" {
		return f.usageError("--dir is required (the folder in your sqlc project that receives migrations/ and queries/)")
	}
	if *pkg == "" {
		*pkg = strings.ReplaceAll(*table, "_", "")
	}
	if !token.IsIdentifier(*pkg) || token.IsKeyword(*pkg) || strings.ToLower(*pkg) != *pkg {
		return f.usageError("invalid Go package name %q: pass --package with a lower-case Go identifier (not a keyword)", *pkg)
	}
	r := tableRename{table: *table, camel: camelCase(*table)}

	// Render everything first: nothing is written unless all of it works.
	type file struct{ path, body string }
	var files []file
	render := func(fsys fs.FS, srcDir, outDir string, rename func(string) string) error {
		names, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, name := range names {
			src, err := fs.ReadFile(fsys, name)
			if err != nil {
				return err
			}
			body, produced := r.renameSQL(string(src))
			for _, id := range produced {
				if len(id) > 63 {
					return fmt.Errorf("--table %q is too long: the derived name %s is %d bytes and PostgreSQL truncates names at 63; use at most %d characters",
						*table, id, len(id), len(*table)-(len(id)-63))
				}
			}
			header := fmt.Sprintf("-- Copied by `pgoutbox init --table %s` from pgoutbox's %s/%s, with the table renamed.\n", *table, srcDir, name)
			if strings.HasPrefix(string(src), "-- +goose") {
				body = header + body
			} else {
				body = header + "--\n" + body
			}
			if *table != "outbox" {
				if left := leftovers(body, *table, r.camel); len(left) > 0 {
					return fmt.Errorf("internal error: %s still names %s after renaming; please report it", name, strings.Join(left, ", "))
				}
			}
			files = append(files, file{path: filepath.Join(outDir, rename(name)), body: body})
		}
		return nil
	}
	migDir := filepath.Join(*dir, "migrations")
	queryDir := filepath.Join(*dir, "queries")
	renameMigration := func(name string) string {
		if m := migrationFileRe.FindStringSubmatch(name); m != nil {
			return m[1] + "_" + *table + m[2] + ".sql"
		}
		return name
	}
	if err := render(migrations.FS(), "migrations", migDir, renameMigration); err != nil {
		return failf("init: %v", err)
	}
	if err := render(queries.FS, "queries", queryDir, func(s string) string { return s }); err != nil {
		return failf("init: %v", err)
	}

	var existing []string
	for _, fl := range files {
		if _, err := os.Stat(fl.path); err == nil {
			existing = append(existing, fl.path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return failf("init: %v", err)
		}
	}
	if len(existing) > 0 && !*force {
		return failf("init: refusing to overwrite existing files (pass --force to replace them): %s", strings.Join(existing, ", "))
	}
	for _, d := range []string{migDir, queryDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return failf("init: %v", err)
		}
	}
	for _, fl := range files {
		if err := os.WriteFile(fl.path, []byte(fl.body), 0o644); err != nil {
			return failf("init: %v", err)
		}
	}

	rel, err := relPath(*sqlcRoot, *dir)
	if err != nil {
		return failf("init: %v", err)
	}
	fmt.Fprint(a.stdout, sqlcEntry(rel, *pkg, *table))

	fmt.Fprintf(a.stderr, "wrote %d files for table %s:\n", len(files), *table)
	for _, fl := range files {
		fmt.Fprintf(a.stderr, "  %s\n", fl.path)
	}
	fmt.Fprintf(a.stderr, `
Next:
  1. add the sql entry printed on stdout to your sqlc.yaml, then run: sqlc generate
  2. apply %s with your goose setup (goose files: -- +goose Up / Down)
  3. producers call %sEnqueue inside their business transaction; the trigger
     %s_notify sends NOTIFY on the channel '%s' at COMMIT
`, migDir, r.camel, *table, *table)
	return nil
}

// relPath returns dir relative to root, with forward slashes (sqlc joins
// the paths of sqlc.yaml to the directory of the file).
func relPath(root, dir string) (string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(absRoot, absDir)
	if err != nil {
		return "", fmt.Errorf("--dir %s is not reachable from --sqlc-root %s: %w", dir, root, err)
	}
	return filepath.ToSlash(rel), nil
}

// sqlcEntry is the sqlc.yaml text for the copied SQL.
func sqlcEntry(rel, pkg, table string) string {
	return fmt.Sprintf(`# sqlc entry for the %[3]s outbox, written by pgoutbox init.
# In an existing sqlc.yaml, add the list item under "sql:".
version: "2"
sql:
  - engine: postgresql
    schema: %[1]s
    queries: %[2]s
    gen:
      go:
        package: %[4]s
        out: %[5]s
        sql_package: pgx/v5
        emit_interface: true
        emit_json_tags: true
        overrides:
          # sqlc matches override types by exact name: a cast @x::interval
          # resolves to pg_catalog.interval.
          - db_type: pg_catalog.interval
            go_type: time.Duration
          - db_type: pg_catalog.interval
            go_type:
              import: time
              type: Duration
              pointer: true
            nullable: true
          - db_type: pg_catalog.timestamptz
            go_type: time.Time
          - db_type: pg_catalog.timestamptz
            go_type:
              import: time
              type: Time
              pointer: true
            nullable: true
          - db_type: timestamptz
            go_type: time.Time
          - db_type: timestamptz
            go_type:
              import: time
              type: Time
              pointer: true
            nullable: true
          - db_type: text
            go_type:
              type: string
              pointer: true
            nullable: true
`, path.Join(rel, "migrations"), path.Join(rel, "queries"), table, pkg, path.Join(rel, pkg))
}
