package cli

import (
	"bytes"
	"cmp"
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
	"time"

	inboxmigrations "github.com/pgoutbox/pgoutbox/inbox/migrations"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
	inboxqueries "github.com/pgoutbox/pgoutbox/queries/inbox"
)

// inboxStampRe finds the stamp every inbox migration carries: which inbox
// migration a file is (a stamp of its own, so that inbox copies and outbox
// copies can share a goose folder).
var inboxStampRe = regexp.MustCompile(`(?m)^-- pgoutbox-inbox-migration: ([0-9]+_[a-z0-9_]+\.sql)[ \t]*$`)

// inboxFlags adds --database-url, --table (default inbox) and --schema for
// the inbox commands, which work on the consumer's database.
func (f *flags) inboxFlags() (dbURL, table, schema *string) {
	dbURL = f.String("database-url", "", "the consumer's PostgreSQL URL or keyword/value DSN (default: $DATABASE_URL)")
	f.hidden["database-url"] = true
	table = f.String("table", "inbox", "the inbox table (its companions are TABLE_aggregates and TABLE_gaps)")
	schema = f.String("schema", "", "the schema of the inbox tables (default: none, resolved through the search_path)")
	return dbURL, table, schema
}

func (a *app) inboxMigrate(ctx context.Context, args []string) error {
	f := newFlags("inbox migrate", "pgoutbox inbox migrate [flags]",
		"Creates or upgrades the inbox tables of package inbox in the consumer's database (not the\n"+
			"outbox's): every pending inbox migration embedded in this build, recorded in a goose version\n"+
			"table of its own ("+inboxmigrations.VersionTable+", or TABLE_migrations for --table), under an\n"+
			"advisory lock so concurrent runs do not race. Safe to run on every deploy.",
		"  DATABASE_URL=postgres://billing:secret@db:5432/billing pgoutbox inbox migrate\n"+
			"  pgoutbox inbox migrate --table billing_inbox --schema billing")
	dbURL, table, schema := f.inboxFlags()
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if _, err := sqlrename.NewTables("inbox", sqlrename.InboxTables, *table, *schema); err != nil {
		return f.usageError("%v", err)
	}
	d, err := a.resolveDatabase(f, *dbURL)
	if err != nil {
		return err
	}
	pool, err := a.connect(ctx, d)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := inboxmigrations.FromPoolFor(ctx, pool, *table, *schema)
	if err != nil {
		return a.dbError("inbox migrate", err)
	}
	defer m.Close()
	res, err := m.Up(ctx)
	for _, r := range res {
		if r.Error == nil {
			fmt.Fprintf(a.stdout, "applied  %s (%s)\n", path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
		}
	}
	if err != nil {
		return a.dbError("inbox migrate", err)
	}
	v, err := m.Version(ctx)
	if err != nil {
		return a.dbError("inbox migrate", err)
	}
	if len(res) == 0 {
		fmt.Fprintf(a.stdout, "inbox tables already up to date: version %d (%s)\n", v, m.VersionTable())
	} else {
		fmt.Fprintf(a.stdout, "inbox tables at version %d (%s)\n", v, m.VersionTable())
	}
	return nil
}

func (a *app) inboxInit(_ context.Context, args []string) error {
	f := newFlags("inbox init", "pgoutbox inbox init --table NAME --dir DIR [flags]",
		`Copies the inbox's SQL into your own sqlc + goose project under another table name
(and optionally in a schema): the inbox migrations into a goose folder and the annotated
queries into DIR/queries, with the tables inbox, inbox_aggregates and inbox_gaps renamed
to NAME, NAME_aggregates and NAME_gaps (their indexes likewise, query names InboxRecord
-> <CamelName>Record). The copies carry a stamp of their own
(-- pgoutbox-inbox-migration: 00001_inbox.sql), so they can share a goose folder with
the outbox's; migrations are numbered after the highest version in that folder (or
from --start-version), and --upgrade copies only the inbox migrations that are new.
On stdout it prints the sqlc.yaml entry to add. Package inbox works on the copy with
inbox.Config{Table: NAME, Schema: SCHEMA}. Existing files are never overwritten
unless --force.`,
		"  pgoutbox inbox init --table billing_inbox --dir internal/billing/inbox\n"+
			"  pgoutbox inbox init --table billing_inbox --schema billing --dir db/inbox --migrations-dir db/migrations")
	table := f.String("table", "", "the inbox table name to use instead of inbox (required)")
	schema := f.String("schema", "", "the schema of the tables (default: none, resolved through the search_path)")
	dir := f.String("dir", "", "directory to write queries/ (and, without --migrations-dir, migrations/) into (required)")
	migDirFlag := f.String("migrations-dir", "", "goose folder to write the migrations into, e.g. your app's own (default: DIR/migrations)")
	startVersion := f.int64("start-version", 0, "goose version of the first migration written (default: after the highest in the folder)")
	upgrade := f.Bool("upgrade", false, "bring an earlier copy up to date: copy only the inbox migrations its stamps do not list, rewrite DIR/queries")
	pkg := f.String("package", "", "Go package name for the generated code in the printed sqlc entry (default: NAME without '_')")
	sqlcRoot := f.String("sqlc-root", ".", "directory of your sqlc.yaml: paths in the printed entry are relative to it")
	force := f.Bool("force", false, "overwrite existing files")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if *table == "" {
		return f.usageError("--table is required (for example --table billing_inbox)")
	}
	names, err := sqlrename.NewTables("inbox", sqlrename.InboxTables, *table, *schema)
	if err != nil {
		return f.usageError("%v", err)
	}
	if *dir == "" {
		return f.usageError("--dir is required (the folder in your sqlc project that receives migrations/ and queries/)")
	}
	if *startVersion < 0 {
		return f.usageError("--start-version must be a positive goose version, got %d", *startVersion)
	}
	*pkg = cmp.Or(*pkg, strings.ReplaceAll(*table, "_", ""))
	if !token.IsIdentifier(*pkg) || token.IsKeyword(*pkg) || strings.ToLower(*pkg) != *pkg {
		return f.usageError("invalid Go package name %q: pass --package with a lower-case Go identifier (not a keyword)", *pkg)
	}
	migDir := cmp.Or(*migDirFlag, filepath.Join(*dir, "migrations"))
	queryDir := filepath.Join(*dir, "queries")
	ownFolder := *migDirFlag == "" || filepath.Clean(*migDirFlag) == filepath.Clean(filepath.Join(*dir, "migrations"))

	// The highest goose version in the folder (outbox copies and the
	// application's own included), and the inbox copies already there.
	folder, err := readGooseFolder(migDir, "\x00")
	if err != nil {
		return failf("inbox init: %v", err)
	}
	stamped, err := inboxCopies(migDir)
	if err != nil {
		return failf("inbox init: %v", err)
	}
	if len(stamped) > 0 && !*upgrade && !*force {
		var have []string
		for src, file := range stamped {
			have = append(have, file+" ("+src+")")
		}
		sort.Strings(have)
		return failf("inbox init: %s already holds inbox migrations: %s\nTo bring them up to date run the same command with --upgrade (or pass --force to rewrite them in place).", migDir, strings.Join(have, ", "))
	}
	next := folder.highest + 1
	if *startVersion > 0 {
		if *startVersion <= folder.highest {
			return failf("inbox init: --start-version %d is not above the highest goose version already in %s (%d, %s)", *startVersion, migDir, folder.highest, folder.highestFile)
		}
		next = *startVersion
	}
	flagsText := "--table " + *table
	if *schema != "" {
		flagsText += " --schema " + *schema
	}
	render := func(src []byte, from string) (string, error) {
		body, produced := names.SQL(string(src))
		for _, id := range produced {
			if len(id) > 63 {
				return "", fmt.Errorf("--table %q is too long: the derived name %s is %d bytes and PostgreSQL truncates names at 63; use at most %d characters",
					*table, id, len(id), len(*table)-(len(id)-63))
			}
		}
		if left := names.Leftovers(body); len(left) > 0 && !names.Identity() {
			return "", fmt.Errorf("internal error: %s still names %s after renaming; please report it", from, strings.Join(left, ", "))
		}
		return fmt.Sprintf("-- Copied by `pgoutbox inbox init %s` from pgoutbox's %s, with the tables renamed.\n", flagsText, from) + body, nil
	}
	type file struct{ path, body string }
	var files []file
	var schemaFiles []string
	migNames, _ := fs.Glob(inboxmigrations.FS(), "*.sql")
	sort.Slice(migNames, func(i, j int) bool { return versionOf(migNames[i]) < versionOf(migNames[j]) })
	for _, name := range migNames {
		have, copied := stamped[name]
		if copied && *upgrade {
			schemaFiles = append(schemaFiles, have)
			continue
		}
		src, err := fs.ReadFile(inboxmigrations.FS(), name)
		if err != nil {
			return failf("inbox init: %v", err)
		}
		// The stamp stays the first line.
		stamp, rest, _ := bytes.Cut(src, []byte("\n"))
		body, err := render(rest, "inbox/migrations/"+name)
		if err != nil {
			return failf("inbox init: %v", err)
		}
		body = string(stamp) + "\n" + body
		if *schema != "" && versionOf(name) == 1 {
			body = strings.Replace(body, "-- +goose Up\n", "-- +goose Up\nCREATE SCHEMA IF NOT EXISTS "+*schema+";\n", 1)
		}
		out := have
		if !copied {
			suffix := strings.TrimSuffix(strings.SplitN(name, "_inbox", 2)[1], ".sql")
			out = fmt.Sprintf("%0*d_%s%s.sql", folder.width, next, *table, suffix)
			next++
		}
		schemaFiles = append(schemaFiles, out)
		files = append(files, file{filepath.Join(migDir, out), body})
	}
	newMigrations := len(files)
	queryNames, _ := fs.Glob(inboxqueries.FS, "*.sql")
	sort.Strings(queryNames)
	for _, name := range queryNames {
		src, err := fs.ReadFile(inboxqueries.FS, name)
		if err != nil {
			return failf("inbox init: %v", err)
		}
		body, err := render(src, "queries/inbox/"+name)
		if err != nil {
			return failf("inbox init: %v", err)
		}
		files = append(files, file{filepath.Join(queryDir, name), body})
	}
	var existing []string
	for _, fl := range files {
		b, err := os.ReadFile(fl.path)
		switch {
		case err == nil:
			if *upgrade && strings.HasPrefix(fl.path, queryDir) && bytes.Contains(b, []byte("pgoutbox inbox init")) {
				continue
			}
			existing = append(existing, fl.path)
		case !errors.Is(err, fs.ErrNotExist):
			return failf("inbox init: %v", err)
		}
	}
	if len(existing) > 0 && !*force {
		return failf("inbox init: refusing to overwrite existing files (pass --force to replace them): %s", strings.Join(existing, ", "))
	}
	for _, d := range []string{migDir, queryDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return failf("inbox init: %v", err)
		}
	}
	for _, fl := range files {
		if err := os.WriteFile(fl.path, []byte(fl.body), 0o644); err != nil {
			return failf("inbox init: %v", err)
		}
	}
	relDir, err := relPath(*sqlcRoot, *dir)
	if err != nil {
		return failf("inbox init: %v", err)
	}
	relMig, err := relPath(*sqlcRoot, migDir)
	if err != nil {
		return failf("inbox init: %v", err)
	}
	schemaEntry := " " + relMig
	if !ownFolder {
		var b strings.Builder
		for _, fl := range schemaFiles {
			fmt.Fprintf(&b, "\n      - %s", path.Join(relMig, fl))
		}
		schemaEntry = b.String()
	}
	entry := sqlcEntry(schemaEntry, path.Join(relDir, "queries"), *pkg, names.Qualified(), path.Join(relDir, *pkg))
	_, entry, _ = strings.Cut(entry, "\n") // its first line names an outbox
	fmt.Fprintf(a.stdout, "# sqlc entry for the %s inbox, written by pgoutbox inbox init.\n%s", names.Qualified(), entry)
	fmt.Fprint(a.stdout, `          # the inbox's positions are nullable bigints
          - db_type: pg_catalog.int8
            go_type:
              type: int64
              pointer: true
            nullable: true
`)
	if *upgrade {
		fmt.Fprintf(a.stderr, "upgrade: %d new inbox migration(s), %d query files rewritten, for %s:\n", newMigrations, len(files)-newMigrations, names.Qualified())
	} else {
		fmt.Fprintf(a.stderr, "wrote %d files for the inbox %s:\n", len(files), names.Qualified())
	}
	for _, fl := range files {
		fmt.Fprintf(a.stderr, "  %s\n", fl.path)
	}
	gooseCmd := fmt.Sprintf(`goose -dir %s -table %s postgres "$DATABASE_URL" up`, migDir, inboxmigrations.VersionTableFor(*table, *schema))
	if *schema != "" {
		// goose creates its version table before the first migration runs.
		gooseCmd = fmt.Sprintf("psql \"$DATABASE_URL\" -c 'CREATE SCHEMA IF NOT EXISTS %s'   # the version table lives in the schema\n       %s", *schema, gooseCmd)
	}
	if !ownFolder {
		gooseCmd = fmt.Sprintf(`goose -dir %s postgres "$DATABASE_URL" up   # or your usual migrator`, migDir)
	}
	fmt.Fprintf(a.stderr, `
Next:
  1. add the sql entry printed on stdout to your sqlc.yaml, then run: sqlc generate
  2. apply %s in the consumer's database:
       %s
  3. consume with inbox.Config{Table: %q, Schema: %q}
`, migDir, gooseCmd, *table, *schema)
	return nil
}

// inboxCopies maps each inbox migration copied into dir (by its stamp) to
// the file holding it. A missing dir holds none.
func inboxCopies(dir string) (map[string]string, error) {
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if m := inboxStampRe.FindSubmatch(b); m != nil {
			if prev, dup := out[string(m[1])]; dup {
				return nil, fmt.Errorf("%s and %s are both copies of the inbox's %s; remove one", prev, e.Name(), m[1])
			}
			out[string(m[1])] = e.Name()
		}
	}
	return out, nil
}
