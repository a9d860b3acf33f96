package adopttest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// grow makes the sample app look like the HR service adoption was tried on:
// 88 goose migrations (numbered, or timestamped with the same names).
func grow(timestamped bool) func(dir string) {
	return func(dir string) {
		mig := filepath.Join(dir, "db", "migrations")
		for n := 4; n <= 88; n++ {
			body := fmt.Sprintf("-- +goose Up\nCREATE TABLE hr.history_%03d (id bigint PRIMARY KEY, note text);\n\n-- +goose Down\nDROP TABLE hr.history_%03d;\n", n, n)
			if err := os.WriteFile(filepath.Join(mig, fmt.Sprintf("%05d_history_%03d.sql", n, n)), []byte(body), 0o644); err != nil {
				panic(err)
			}
		}
		if !timestamped {
			return
		}
		entries, _ := os.ReadDir(mig)
		for _, e := range entries {
			v, rest, _ := strings.Cut(e.Name(), "_")
			var n int
			fmt.Sscanf(v, "%d", &n)
			ts := fmt.Sprintf("2024%02d%02d120000", 1+n/28, 1+n%28)
			if err := os.Rename(filepath.Join(mig, e.Name()), filepath.Join(mig, ts+"_"+rest)); err != nil {
				panic(err)
			}
		}
	}
}

// applyRe is init's instruction for the app's own goose folder.
var applyRe = regexp.MustCompile(`then apply (\S+) as you apply your own migrations`)

// The shapes users try first, each with the app's own migrator and version
// table, and every command init prints run exactly as printed:
//   - the app's goose folder gets the copies: no second version table runs
//     the app's migrations again, the outbox package holds none of the app's
//     models, and the app's package gains exactly the one type init names;
//   - a folder of its own: the app's package does not change at all;
//   - then migrate status tells the truth, migrate up does not refuse, the
//     app's own migrator still runs, and init --upgrade on an older copy
//     changes the one sqlc entry.
func TestAdopt_InitShapes(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name     string
		edit     func(string)
		appGoose string // the app's own migrate command
		flags    string
		ownDir   bool // migrations in a folder of their own
		first    string
		schema   string // --schema
	}{
		{"dir db", grow(false), `goose -dir db/migrations postgres "$DATABASE_URL" up`, "--dir db", false, "00089_hr_outbox.sql", ""},
		{"dir db, migrations-dir db/migrations", grow(false), `goose -dir db/migrations postgres "$DATABASE_URL" up`, "--dir db --migrations-dir db/migrations", false, "00089_hr_outbox.sql", ""},
		{"a folder of its own", grow(false), `goose -dir db/migrations postgres "$DATABASE_URL" up`, "--dir db/outbox", true, "00001_hr_outbox.sql", ""},
		{"timestamped versions", grow(true), `goose -dir db/migrations postgres "$DATABASE_URL" up`, "--dir db/outbox --migrations-dir db/migrations", false, "20240405120001_hr_outbox.sql", ""},
		{"the app's own version table", grow(false), `goose -dir db/migrations -table app_schema_versions postgres "$DATABASE_URL" up`, "--dir db --migrations-dir db/migrations", false, "00089_hr_outbox.sql", ""},
		{"the app's own version table, a folder of its own", grow(false), `goose -dir db/migrations -table app_schema_versions postgres "$DATABASE_URL" up`, "--dir db/outbox", true, "00001_hr_outbox.sql", ""},
		{"a schema of its own", grow(false), `goose -dir db/migrations postgres "$DATABASE_URL" up`, "--dir db/outbox", true, "00001_hr_outbox.sql", "hr"},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			a := prepare(t, sh.edit, sh.appGoose)
			table := "--table hr_outbox"
			if sh.schema != "" {
				table += " --schema " + sh.schema
			}
			initCmd := "pgoutbox init " + table + " " + sh.flags + " --sqlc-config sqlc.yaml"
			printed := a.run(t, initCmd)
			migDir := "db/outbox/migrations"
			if !sh.ownDir {
				m := applyRe.FindStringSubmatch(printed)
				if m == nil {
					t.Fatalf("init names no folder to apply with the app's migrator:\n%s", printed)
				}
				migDir = m[1]
			}
			if _, err := os.Stat(filepath.Join(a.dir, migDir, sh.first)); err != nil {
				t.Errorf("the first copy: %v\n%s", err, printed)
			}
			// Every command init prints, as printed; for the app's folder,
			// the app's own migrator applies the copies.
			cmds := initCommands(printed)
			if len(cmds) == 0 {
				t.Fatalf("init printed no command:\n%s", printed)
			}
			for _, c := range cmds {
				if strings.HasPrefix(c, "pgoutbox run ") {
					if !sh.ownDir {
						a.run(t, sh.appGoose)
					}
					a.run(t, "pgoutbox enqueue "+table+" --aggregate-type employee --aggregate-id 1 --event-type EmployeeHired --payload '{}'")
					a.relay(t, c, `{"id":"1",…"event_type":"EmployeeHired",…}`)
					continue
				}
				a.run(t, c)
			}
			a.run(t, "go build ./...")

			// The outbox package holds none of the app's models.
			models := readDir(t, filepath.Join(a.dir, strings.Fields(sh.flags)[1], "hroutbox"))
			if strings.Contains(models["models.go"], "Employee") || strings.Contains(models["models.go"], "History") {
				t.Errorf("the outbox package holds the app's models:\n%s", models["models.go"])
			}
			// The app's package: unchanged, or exactly the one type init names.
			gained := a.storeGained(t)
			switch {
			case sh.ownDir && len(gained) > 0:
				t.Errorf("the app's package store gained %v", gained)
			case !sh.ownDir && strings.Join(gained, ",") != "HrOutbox,HrOutboxAttempt,HrOutboxDelivered,HrOutboxRelay,HrOutboxSequenced":
				t.Errorf("the app's package store gained %v; init says it gains HrOutbox, HrOutboxAttempt, HrOutboxDelivered, HrOutboxRelay and HrOutboxSequenced only:\n%s", gained, printed)
			case !sh.ownDir && !strings.Contains(printed, "its package gains five types, the tables' models HrOutbox, HrOutboxAttempt, HrOutboxDelivered, HrOutboxRelay and HrOutboxSequenced"):
				t.Errorf("init does not say what the app's package gains:\n%s", printed)
			}

			// migrate status tells the truth, migrate up does not refuse, and
			// the app's own migrator still runs.
			st := a.run(t, "pgoutbox migrate status "+table)
			if !strings.Contains(st, "up to date") || strings.Contains(st, "pending") || strings.Contains(st, "missing") {
				t.Errorf("migrate status:\n%s", st)
			}
			a.run(t, "pgoutbox migrate up "+table)
			if out := a.run(t, sh.appGoose); !strings.Contains(out, "no migrations to run") {
				t.Errorf("the app's migrator after adopting: %s", out)
			}

			// An older copy (its newest migration not there yet, nor in the
			// sqlc entry): --upgrade copies it and changes the one entry.
			names, _ := filepath.Glob(filepath.Join(a.dir, migDir, "*_hr_outbox*.sql"))
			newest := filepath.Base(names[len(names)-1])
			if err := os.Remove(filepath.Join(a.dir, migDir, newest)); err != nil {
				t.Fatal(err)
			}
			cfg, _ := os.ReadFile(filepath.Join(a.dir, "sqlc.yaml"))
			old := strings.Replace(string(cfg), "      - "+migDir+"/"+newest+"\n", "", 1)
			mustWrite(t, filepath.Join(a.dir, "sqlc.yaml"), old)
			up := a.run(t, initCmd+" --upgrade")
			if !strings.Contains(up, "upgrade: 1 new migration(s)") {
				t.Errorf("init --upgrade:\n%s", up)
			}
			after, _ := os.ReadFile(filepath.Join(a.dir, "sqlc.yaml"))
			if string(after) != string(cfg) {
				t.Errorf("sqlc.yaml after --upgrade:\n%s\nwant:\n%s", after, cfg)
			}
			a.run(t, "sqlc generate && go build ./...")
		})
	}
}
