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
	"strconv"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/queries"
)

const initAbout = `Copies pgoutbox's SQL into your own sqlc + goose project under another table
name (and optionally in a schema): the goose migrations into a goose folder and
the annotated queries into DIR/queries, with the table outbox and everything
derived from it renamed (indexes outbox_leased -> NAME_leased, triggers and
functions outbox_commit_order -> NAME_commit_order, the wake-up's flag
'outbox.wake_queued' -> 'NAME.wake_queued', the NOTIFY channel 'outbox' ->
'NAME', query names OutboxEnqueue -> <CamelName>Enqueue). Only whole identifiers are
renamed; the word "outbox" in comment prose is kept. With --schema, the table
and its functions are schema-qualified and the first migration creates the
schema if it does not exist.

Migrations never take a goose version that is already used: they are numbered
after the highest version in the target folder (numbered 00001_... or
timestamped 20240101120000_..., keeping the width), or from --start-version.
Two layouts, and init says which one it used:
  - a folder of their own, DIR/migrations (the default, when it holds no
    migrations of yours), applied under a version table of their own
    (pgoutbox_migrations for the table outbox, NAME_migrations otherwise):
    the history pgoutbox migrate up --table NAME keeps, so either applies them.
    Your own sqlc package and goose history stay exactly as they are.
  - your application's goose folder (--migrations-dir db/migrations, or --dir db
    when db/migrations holds your migrations): numbered after your latest and
    applied by your usual goose command and version table. An sqlc entry of
    yours that reads that whole folder gains the tables' model types (NAME,
    NAME_attempts and NAME_relays).
The queries go to DIR/queries, or to DIR/NAME/queries when DIR/queries holds
queries of your own.
Every copied file starts with a stamp (-- pgoutbox-migration: 00002_outbox_notify.sql)
saying which pgoutbox migration it is; --upgrade reads the stamps, copies only
the migrations that are new since, numbered after your latest, rewrites the
queries, and says what changed in the sqlc entry (never a second entry).

The sqlc.yaml entry (paths relative to --sqlc-root) generates a package of its
own from the pgoutbox files only, so it holds no copies of your models, with
the type overrides pgoutbox uses (interval -> time.Duration, timestamptz ->
time.Time, sql_package pgx/v5). It is printed on stdout, or, with
--sqlc-config sqlc.yaml, added to that file (its comments and layout kept).
Then init prints the commands that follow, each to run as printed: sqlc
generate, the goose command (for a folder of their own), the relay.

NAME (and SCHEMA) must match ^[a-z_][a-z0-9_]{0,62}$, must not be a reserved SQL
key word (PostgreSQL's reserved list: user, order, table, select, ...) nor start
with pg_, and every name derived from it must fit PostgreSQL's 63-byte limit.
Existing files are never overwritten unless --force.

The dispatcher (Config.Table, Config.Schema) and every pgoutbox command
(--table, --schema) work on the copied table.`

const initExamples = `  pgoutbox init --table hr_outbox --dir db/outbox --sqlc-config sqlc.yaml
  pgoutbox init --table hr_outbox --dir db/outbox --sqlc-config sqlc.yaml --upgrade
  pgoutbox init --table hr_outbox --schema hr --dir db/outbox --migrations-dir db/migrations > sqlc.outbox.yaml
  pgoutbox init --table billing_outbox --dir ../svc/sql --sqlc-root ../svc --start-version 20250101000000`

var (
	migrationFileRe = regexp.MustCompile(`^([0-9]+)_outbox((?:_[a-z0-9_]*)?)\.sql$`)
	// stampRe finds the stamp every pgoutbox migration carries (and init
	// writes into every copy): which pgoutbox migration the file is.
	stampRe = regexp.MustCompile(`(?m)^-- pgoutbox-migration: ([0-9]+_[a-z0-9_]+\.sql)[ \t]*$`)
	// fromRe finds the source named in init's header (every release of
	// init wrote it, also before stamps existed).
	fromRe = regexp.MustCompile("(?m)^-- Copied by `pgoutbox init [^`]*` from pgoutbox's migrations/([0-9]+_[a-z0-9_]+\\.sql)")
	// copiedRe finds init's header in a copied file.
	copiedRe = regexp.MustCompile("(?m)^-- Copied by `pgoutbox init --table ([a-z0-9_]+)(?: --schema ([a-z0-9_]+))?`")
	// gooseFileRe is a goose migration file name: version, '_', anything.
	gooseFileRe = regexp.MustCompile(`^([0-9]+)_.*\.(sql|go)$`)
)

// gooseFolder is what init reads from the folder receiving migrations.
type gooseFolder struct {
	highest     int64
	highestFile string
	width       int
	stamped     map[string]string // pgoutbox migration name -> file in the folder
	copiedAs    map[string]string // file -> "table" or "schema.table" from init's header
	// foreign counts the goose migrations that are not pgoutbox copies (the
	// application's own); foreignLatest is the highest of them.
	foreign       int
	foreignLatest string
	foreignV      int64
}

// readGooseFolder scans dir (a missing dir is empty). A .sql file without a
// version prefix is an error: goose itself refuses such a folder.
//
// A file is recognized as a copy of pgoutbox migration M by, in order: its
// stamp (-- pgoutbox-migration: M), the source named in init's header
// (copies made before stamps existed), or, for a goose file with no header
// (copied by hand, perhaps renumbered), its name: any version, then table
// plus M's suffix (00089_outbox_notify.sql is 00002_outbox_notify.sql).
func readGooseFolder(dir, table string) (gooseFolder, error) {
	g := gooseFolder{width: 5, stamped: map[string]string{}, copiedAs: map[string]string{}}
	byName := map[string]string{} // "_notify.sql" -> 00002_outbox_notify.sql
	embedded, _ := fs.Glob(migrations.FS(), "*.sql")
	for _, e := range embedded {
		if m := migrationFileRe.FindStringSubmatch(e); m != nil {
			byName[m[2]+".sql"] = e
		}
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return g, err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".sql") || strings.HasSuffix(name, ".go")) || strings.HasSuffix(name, "_test.go") {
			continue
		}
		m := gooseFileRe.FindStringSubmatch(name)
		if m == nil {
			if strings.HasSuffix(name, ".sql") {
				return g, fmt.Errorf("%s has no goose version prefix (NNNNN_name.sql); goose would refuse this folder, so init cannot number after it", filepath.Join(dir, name))
			}
			continue // a .go file that is not a migration (embed.go, ...)
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return g, fmt.Errorf("%s: version %s: %v", filepath.Join(dir, name), m[1], err)
		}
		if v > g.highest || g.highestFile == "" {
			g.highest, g.highestFile, g.width = v, name, len(m[1])
		}
		if m[2] != "sql" {
			g.noteForeign(v, name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return g, err
		}
		src := ""
		if st := stampRe.FindSubmatch(b); st != nil {
			src = string(st[1])
		} else if fr := fromRe.FindSubmatch(b); fr != nil {
			src = string(fr[1])
		} else if bytes.Contains(b, []byte("-- +goose Up")) {
			src = byName[strings.TrimPrefix(name, m[1]+"_"+table)]
			if !strings.HasPrefix(name, m[1]+"_"+table) {
				src = ""
			}
		}
		if src == "" {
			g.noteForeign(v, name)
		}
		if src != "" {
			if prev, dup := g.stamped[src]; dup {
				return g, fmt.Errorf("%s and %s are both copies of pgoutbox's %s; remove one", prev, name, src)
			}
			g.stamped[src] = name
			if c := copiedRe.FindSubmatch(b); c != nil {
				g.copiedAs[name] = qualified(string(c[2]), string(c[1]))
			} else {
				g.copiedAs[name] = "outbox" // copied by hand, unchanged
			}
		}
	}
	return g, nil
}

func (g *gooseFolder) noteForeign(v int64, name string) {
	g.foreign++
	if v > g.foreignV || g.foreignLatest == "" {
		g.foreignV, g.foreignLatest = v, name
	}
}

func qualified(schema, table string) string {
	if schema == "" {
		return table
	}
	return schema + "." + table
}

func (a *app) initCmd(_ context.Context, args []string) error {
	f := newFlags("init", "pgoutbox init --table NAME --dir DIR [flags]", initAbout, initExamples)
	table := f.String("table", "", "the table name to use instead of outbox (required)")
	schema := f.String("schema", "", "the schema of the table (default: none, resolved through the search_path)")
	dir := f.String("dir", "", "directory to write queries/ (and, without --migrations-dir, migrations/) into (required)")
	migDirFlag := f.String("migrations-dir", "", "goose folder to write the migrations into, e.g. your app's own (default: DIR/migrations)")
	startVersion := f.int64("start-version", 0, "goose version of the first migration written (default: after the highest in the folder)")
	upgrade := f.Bool("upgrade", false, "bring an earlier copy up to date: copy only the migrations its stamps do not list, rewrite the queries")
	pkg := f.String("package", "", "Go package name for the generated code in the sqlc entry (default: NAME without '_')")
	sqlcRoot := f.String("sqlc-root", ".", "directory of your sqlc.yaml: paths in the printed entry are relative to it")
	sqlcConfig := f.String("sqlc-config", "", "your sqlc.yaml: add the entry to it (created when missing; with --upgrade, add the new files to the entry) instead of printing it")
	force := f.Bool("force", false, "overwrite existing files")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if *table == "" {
		return f.usageError("--table is required (for example --table billing_outbox)")
	}
	r, err := sqlrename.New(*table, *schema)
	if err != nil {
		return f.usageError("%v", err)
	}
	if *dir == "" {
		return f.usageError("--dir is required (the folder in your sqlc project that receives migrations/ and queries/)")
	}
	if *startVersion < 0 {
		return f.usageError("--start-version must be a positive goose version, got %d", *startVersion)
	}
	if *pkg == "" {
		*pkg = strings.ReplaceAll(*table, "_", "")
	}
	if !token.IsIdentifier(*pkg) || token.IsKeyword(*pkg) || strings.ToLower(*pkg) != *pkg {
		return f.usageError("invalid Go package name %q: pass --package with a lower-case Go identifier (not a keyword)", *pkg)
	}
	if *sqlcConfig != "" {
		if strings.HasSuffix(*sqlcConfig, ".json") {
			return f.usageError("--sqlc-config %s: init edits YAML only; leave the flag out and add the printed entry to your JSON config", *sqlcConfig)
		}
		if f.visited("sqlc-root") && filepath.Clean(*sqlcRoot) != filepath.Dir(filepath.Clean(*sqlcConfig)) {
			return f.usageError("--sqlc-root %s is not the folder of --sqlc-config %s: leave --sqlc-root out", *sqlcRoot, *sqlcConfig)
		}
		*sqlcRoot = filepath.Dir(*sqlcConfig)
	}
	migDir := cmp.Or(*migDirFlag, filepath.Join(*dir, "migrations"))
	folder, err := readGooseFolder(migDir, *table)
	if err != nil {
		return failf("init: %v", err)
	}
	// A folder of its own holds pgoutbox's migrations only, applied under
	// their own version table. A folder that holds the application's
	// migrations too (--dir db with db/migrations, or --migrations-dir) is
	// the application's goose history: there the copies are numbered after
	// the application's latest and applied by its own command.
	defaultFolder := *migDirFlag == "" || filepath.Clean(*migDirFlag) == filepath.Clean(filepath.Join(*dir, "migrations"))
	ownFolder := defaultFolder && folder.foreign == 0
	queryDir, err := pickQueryDir(*dir, *table, r.Camel())
	if err != nil {
		return failf("init: %v", err)
	}
	if len(folder.stamped) > 0 && !*upgrade && !*force {
		var have []string
		for src, file := range folder.stamped {
			have = append(have, file+" ("+src+")")
		}
		sort.Strings(have)
		return failf("init: %s already holds pgoutbox migrations: %s\nTo bring them up to date run the same command with --upgrade (or pass --force to rewrite them in place).", migDir, strings.Join(have, ", "))
	}
	for file, as := range folder.copiedAs {
		if as != r.Qualified() {
			return failf("init: %s was copied for the table %s, not %s: pass the --table and --schema it was copied with", filepath.Join(migDir, file), as, r.Qualified())
		}
	}
	next := folder.highest + 1
	if *startVersion > 0 {
		if *startVersion <= folder.highest {
			return failf("init: --start-version %d is not above the highest goose version already in %s (%d, %s): goose would refuse a duplicate or out-of-order version; use %d or more, or leave --start-version out",
				*startVersion, migDir, folder.highest, folder.highestFile, folder.highest+1)
		}
		next = *startVersion
	}

	// Render everything first: nothing is written unless all of it works.
	type file struct{ path, body string }
	var files []file
	render := func(src []byte, srcDir, name string) (string, error) {
		body, produced := r.SQL(string(src))
		for _, id := range produced {
			if len(id) > 63 {
				return "", fmt.Errorf("--table %q is too long: the derived name %s is %d bytes and PostgreSQL truncates names at 63; use at most %d characters",
					*table, id, len(id), len(*table)-(len(id)-63))
			}
		}
		flags := "--table " + *table
		if *schema != "" {
			flags += " --schema " + *schema
		}
		header := fmt.Sprintf("-- Copied by `pgoutbox init %s` from pgoutbox's %s/%s, with the table renamed.\n", flags, srcDir, name)
		if srcDir == "migrations" {
			// The stamp comes first, whether the source carries it or not.
			body = stampRe.ReplaceAllString(body, "")
			body = strings.TrimPrefix(body, "\n")
			header = "-- pgoutbox-migration: " + name + "\n" + header
		}
		if strings.HasPrefix(body, "-- ") {
			body = header + body
		} else {
			body = header + "--\n" + body
		}
		if !r.Identity() {
			if left := sqlrename.Leftovers(body, *table, r.Camel()); len(left) > 0 && *table != "outbox" {
				return "", fmt.Errorf("internal error: %s still names %s after renaming; please report it", name, strings.Join(left, ", "))
			}
		}
		return body, nil
	}
	migNames, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		return failf("init: %v", err)
	}
	sort.Slice(migNames, func(i, j int) bool { return versionOf(migNames[i]) < versionOf(migNames[j]) })
	var schemaFiles, newFiles []string // the pgoutbox migrations in migDir, for the sqlc entry
	for _, name := range migNames {
		have, copied := folder.stamped[name]
		if copied && *upgrade {
			schemaFiles = append(schemaFiles, have)
			continue
		}
		src, err := fs.ReadFile(migrations.FS(), name)
		if err != nil {
			return failf("init: %v", err)
		}
		body, err := render(src, "migrations", name)
		if err != nil {
			return failf("init: %v", err)
		}
		if *schema != "" && versionOf(name) == 1 {
			body = strings.Replace(body, "-- +goose Up\n", "-- +goose Up\nCREATE SCHEMA IF NOT EXISTS "+*schema+";\n", 1)
		}
		suffix := ""
		if m := migrationFileRe.FindStringSubmatch(name); m != nil {
			suffix = m[2]
		}
		out := have // --force rewrites a copy in place, under its name
		if !copied {
			if ownFolder && *startVersion == 0 && versionOf(name) > next {
				// A folder of its own shares its version table with
				// `pgoutbox migrate up --table`: each copy keeps the
				// version this build gives it, even past a gap in the
				// numbering, so either applies the other's.
				next = versionOf(name)
			}
			out = fmt.Sprintf("%0*d_%s%s.sql", folder.width, next, *table, suffix)
			next++
			newFiles = append(newFiles, out)
		}
		schemaFiles = append(schemaFiles, out)
		files = append(files, file{path: filepath.Join(migDir, out), body: body})
	}
	newMigrations := len(files)
	queryNames, err := fs.Glob(queries.FS, "*.sql")
	if err != nil {
		return failf("init: %v", err)
	}
	sort.Strings(queryNames)
	for _, name := range queryNames {
		src, err := fs.ReadFile(queries.FS, name)
		if err != nil {
			return failf("init: %v", err)
		}
		body, err := render(src, "queries", name)
		if err != nil {
			return failf("init: %v", err)
		}
		files = append(files, file{path: filepath.Join(queryDir, name), body: body})
	}

	var existing []string
	// The queries the rewritten files held before and hold now: those gone
	// are named, since their generated methods go at the next sqlc generate.
	before, after := map[string]bool{}, map[string]bool{}
	for _, fl := range files {
		if strings.HasPrefix(fl.path, queryDir) {
			for _, m := range queryNameRe.FindAllStringSubmatch(fl.body, -1) {
				after[m[1]] = true
			}
		}
	}
	for _, fl := range files {
		b, err := os.ReadFile(fl.path)
		switch {
		case err == nil:
			// --upgrade rewrites pgoutbox's query files: those init wrote
			// before, or copied by hand (they hold this table's query names).
			if *upgrade && strings.HasPrefix(fl.path, queryDir) && isPgoutboxQueries(b, r.Camel()) {
				for _, m := range queryNameRe.FindAllStringSubmatch(string(b), -1) {
					before[m[1]] = true
				}
				continue
			}
			existing = append(existing, fl.path)
		case !errors.Is(err, fs.ErrNotExist):
			return failf("init: %v", err)
		}
	}
	if len(existing) > 0 && !*force {
		return failf("init: refusing to overwrite existing files (pass --force to replace them): %s", strings.Join(existing, ", "))
	}

	relMig, err := relPath(*sqlcRoot, migDir)
	if err != nil {
		return failf("init: %v", err)
	}
	relQueries, err := relPath(*sqlcRoot, queryDir)
	if err != nil {
		return failf("init: %v", err)
	}
	relDir, err := relPath(*sqlcRoot, *dir)
	if err != nil {
		return failf("init: %v", err)
	}
	schemaEntry := " " + relMig
	var schemaPaths, newPaths []string
	for _, fl := range schemaFiles {
		schemaPaths = append(schemaPaths, path.Join(relMig, fl))
	}
	for _, fl := range newFiles {
		newPaths = append(newPaths, path.Join(relMig, fl))
	}
	if !ownFolder {
		// Only pgoutbox's files of the shared folder: the generated package
		// then holds no copies of the application's models.
		var b strings.Builder
		for _, p := range schemaPaths {
			fmt.Fprintf(&b, "\n      - %s", p)
		}
		schemaEntry = b.String()
	}
	entry := sqlcEntry(schemaEntry, relQueries, *pkg, r.Qualified(), path.Join(relDir, *pkg))

	// The sqlc config, edited before any file is written, so that a config
	// init cannot edit leaves nothing half done.
	var cfgBefore, cfgAfter string
	var cfgAdded []string
	if *sqlcConfig != "" {
		b, err := os.ReadFile(*sqlcConfig)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !*upgrade:
			cfgAfter = entry
		case err != nil:
			return failf("init: --sqlc-config: %v", err)
		case *upgrade:
			cfgBefore = string(b)
			cfgAfter, cfgAdded, err = sqlcAddSchemaFiles(cfgBefore, relQueries, schemaPaths)
		default:
			cfgBefore = string(b)
			cfgAfter, err = sqlcAddItem(cfgBefore, entry[strings.Index(entry, "\nsql:\n")+len("\nsql:\n"):], relQueries)
		}
		if err != nil {
			return failf("init: --sqlc-config %s: %v", *sqlcConfig, err)
		}
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
	if *sqlcConfig != "" && cfgAfter != cfgBefore {
		if err := os.WriteFile(*sqlcConfig, []byte(cfgAfter), 0o644); err != nil {
			return failf("init: %v", err)
		}
	}

	// --upgrade names pgoutbox's query files of an earlier release that this
	// one no longer ships (the web console's statements moved to a package
	// of pgoutbox's own): they are left in place, since the application may
	// call them, but pgoutbox no longer keeps them in step with the schema.
	var stale []string
	if *upgrade {
		shipped := map[string]bool{}
		for _, n := range queryNames {
			shipped[n] = true
		}
		old, err := filepath.Glob(filepath.Join(queryDir, "*.sql"))
		if err != nil {
			return failf("init: %v", err)
		}
		for _, p := range old {
			if shipped[filepath.Base(p)] {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return failf("init: %v", err)
			}
			if isPgoutboxQueries(b, r.Camel()) {
				stale = append(stale, p)
			}
		}
	}
	if *upgrade {
		fmt.Fprintf(a.stderr, "upgrade: %d new migration(s), %d query files rewritten, for table %s:\n", newMigrations, len(files)-newMigrations, r.Qualified())
	} else {
		fmt.Fprintf(a.stderr, "wrote %d files for table %s:\n", len(files), r.Qualified())
	}
	for _, fl := range files {
		fmt.Fprintf(a.stderr, "  %s\n", fl.path)
	}
	for _, p := range stale {
		fmt.Fprintf(a.stderr, "  %s: no longer part of pgoutbox's queries (this release does not update it); delete it unless your code calls its queries\n", p)
	}
	var gone []string
	for n := range before {
		if !after[n] {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		fmt.Fprintf(a.stderr, "  queries the rewritten files no longer hold (their methods go at your next sqlc generate; the relay never ran them, and `pgoutbox stats` and the CLI keep the operators' reads): %s\n", strings.Join(gone, ", "))
	}

	// The sqlc entry: printed, written, or (on --upgrade) only what changed.
	fmt.Fprintln(a.stderr)
	switch {
	case *sqlcConfig != "" && !*upgrade:
		fmt.Fprintf(a.stderr, "%s: added the entry generating package %s into %s from %s and %s only.\n", *sqlcConfig, *pkg, path.Join(relDir, *pkg), relMig, relQueries)
	case *sqlcConfig != "" && len(cfgAdded) > 0:
		fmt.Fprintf(a.stderr, "%s: added %d file(s) to the schema list of the entry for %s: %s\n", *sqlcConfig, len(cfgAdded), relQueries, strings.Join(cfgAdded, ", "))
	case *upgrade && ownFolder:
		fmt.Fprintf(a.stderr, "sqlc.yaml: no change: the entry's schema is the folder %s, which now holds the new files.\n", relMig)
	case *upgrade && len(newPaths) == 0:
		fmt.Fprintln(a.stderr, "sqlc.yaml: no change: no new migration.")
	case *upgrade && *sqlcConfig != "":
		fmt.Fprintf(a.stderr, "%s: no change: the entry for %s already lists every file.\n", *sqlcConfig, relQueries)
	case *upgrade:
		for _, p := range newPaths {
			fmt.Fprintf(a.stdout, "      - %s\n", p)
		}
		fmt.Fprintf(a.stderr, "sqlc.yaml: add the %d line(s) printed on stdout to the schema list of your entry for %s (the rest of the entry stays as it is).\n", len(newPaths), relQueries)
	default:
		fmt.Fprint(a.stdout, entry)
		fmt.Fprintln(a.stderr, `sqlc.yaml: add the entry printed on stdout as an item under "sql:" (or pass --sqlc-config sqlc.yaml and init adds it).`)
	}
	if !ownFolder && !*upgrade {
		fmt.Fprintf(a.stderr, "note: an sqlc entry of yours whose schema is the folder %s now also sees the tables %s, %s_attempts, %s_delivered, %s_relays and %s_sequenced: its package gains five types, the tables' models %s, %sAttempt, %sDelivered, %sRelay and %sSequenced (no query, no DBTX method). To keep your package as it is, list your own files in that entry's schema, or use a folder of their own (leave out --migrations-dir).\n",
			relMig, r.Qualified(), r.Qualified(), r.Qualified(), r.Qualified(), r.Qualified(), r.Camel(), r.Camel(), r.Camel(), r.Camel(), r.Camel())
	}

	runFlags := "--table " + *table
	if *schema != "" {
		runFlags += " --schema " + *schema
	}
	fmt.Fprintln(a.stderr, "\nNext, in the folder of your sqlc.yaml, with DATABASE_URL set:")
	fmt.Fprintln(a.stderr, "  $ sqlc generate")
	if ownFolder {
		gooseCmd := fmt.Sprintf(`goose -dir %s -table %s postgres "$DATABASE_URL" up`, relPathOr(*sqlcRoot, migDir), migrations.VersionTableFor(*table, *schema))
		migrateCmd := "pgoutbox migrate up " + runFlags
		if *schema != "" {
			// goose creates its version table in the schema before the
			// first migration runs; pgoutbox migrate creates the schema.
			fmt.Fprintf(a.stderr, "  $ %s\n  $ %s   # or this alone: the same history (%s)\n", migrateCmd, gooseCmd, migrations.VersionTableFor(*table, *schema))
		} else {
			fmt.Fprintf(a.stderr, "  $ %s\n  $ %s   # or this alone: the same history (%s)\n", gooseCmd, migrateCmd, migrations.VersionTableFor(*table, *schema))
		}
	} else {
		fmt.Fprintf(a.stderr, "  then apply %s as you apply your own migrations, with your goose command and version table: they are in your history, numbered after %s.\n",
			relPathOr(*sqlcRoot, migDir), cmp.Or(folder.foreignLatest, folder.highestFile, "nothing (the folder was empty)"))
	}
	fmt.Fprintf(a.stderr, "  $ pgoutbox run %s --publisher stdout   # the relay; Ctrl-C stops it\n", runFlags)
	fmt.Fprintf(a.stderr, "Producers call %sEnqueue (package %s) inside their business transaction (it wakes an idle relay at COMMIT; after rows of your own, call %sWake).\nIn Go: dispatcher.Config{Table: %q, Schema: %q}.\n", r.Camel(), *pkg, r.Camel(), *table, *schema)
	return nil
}

// queryNameRe finds the query names of an sqlc query file.
var queryNameRe = regexp.MustCompile(`(?m)^-- name: (\w+) :`)

// isPgoutboxQueries reports whether a query file was copied from pgoutbox:
// written by init, or copied by hand (it holds this table's query names).
func isPgoutboxQueries(b []byte, camel string) bool {
	return copiedRe.Match(b) || bytes.Contains(b, []byte("-- name: "+camel))
}

// pickQueryDir is DIR/queries, unless that folder holds queries of the
// application's own (--dir db with db/queries): then DIR/TABLE/queries, so
// that no sqlc entry reads both.
func pickQueryDir(dir, table, camel string) (string, error) {
	own := filepath.Join(dir, table, "queries")
	if _, err := os.Stat(own); err == nil {
		return own, nil
	}
	plain := filepath.Join(dir, "queries")
	entries, err := os.ReadDir(plain)
	if errors.Is(err, fs.ErrNotExist) {
		return plain, nil
	}
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		if _, err := fs.Stat(queries.FS, e.Name()); err == nil {
			continue // one of pgoutbox's files, perhaps edited
		}
		b, err := os.ReadFile(filepath.Join(plain, e.Name()))
		if err != nil {
			return "", err
		}
		if !isPgoutboxQueries(b, camel) {
			return own, nil
		}
	}
	return plain, nil
}

// relPathOr is dir relative to root (the folder the printed commands run
// in), or dir as given when it is absolute or cannot be made relative.
func relPathOr(root, dir string) string {
	if filepath.IsAbs(dir) {
		return dir
	}
	if rel, err := relPath(root, dir); err == nil {
		return rel
	}
	return dir
}

// versionOf is the goose version of a migration file name.
func versionOf(name string) int64 {
	v, _ := strconv.ParseInt(strings.SplitN(name, "_", 2)[0], 10, 64)
	return v
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

// sqlcEntry is the sqlc.yaml text for the copied SQL; schema is " path" or
// a YAML list (starting with a newline).
func sqlcEntry(schema, queries, pkg, table, out string) string {
	return fmt.Sprintf(`# sqlc entry for the %[3]s outbox, written by pgoutbox init.
# In an existing sqlc.yaml, add the list item under "sql:".
# Needs sqlc 1.31.1 or later (older ones type the column txid as interface{}).
version: "2"
sql:
  - engine: postgresql
    schema:%[1]s
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
`, schema, queries, table, pkg, out)
}
