package cli

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// A table migrated outside pgoutbox's version table (an application's own
// goose history, or by hand) has no history pgoutbox can read. What it has is
// the schema the migrations left: each migration's footprint is the objects
// it alone creates and no later migration drops — a table, an index, a
// sequence, a function, a trigger, a column, a constraint — and the objects
// an earlier migration created that it drops and no migration creates
// again (absent once it is applied, present before), so the catalogs say
// which migrations the table has, whoever applied them.

// schemaObject is one object of a footprint: it must exist, or with absent
// it must not. With until, the object is one a later migration drops (the
// one named until): it must exist unless that migration is applied.
type schemaObject struct {
	kind, name string
	absent     bool
	until      string
}

var (
	createObjRe = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNIQUE\s+)?(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?(TABLE|INDEX|SEQUENCE|FUNCTION|TRIGGER)\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?([a-zA-Z0-9_."]+)`)
	dropObjRe   = regexp.MustCompile(`(?i)\bDROP\s+(TABLE|INDEX|SEQUENCE|FUNCTION|TRIGGER)\s+(?:CONCURRENTLY\s+)?(?:IF\s+EXISTS\s+)?([a-zA-Z0-9_."]+)`)
	addColRe    = regexp.MustCompile(`(?i)\bADD\s+COLUMN\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-zA-Z0-9_"]+)`)
	addConRe    = regexp.MustCompile(`(?i)\bADD\s+CONSTRAINT\s+([a-zA-Z0-9_"]+)`)
	dropColRe   = regexp.MustCompile(`(?i)\bDROP\s+COLUMN\s+(?:IF\s+EXISTS\s+)?([a-zA-Z0-9_"]+)`)
	dropConRe   = regexp.MustCompile(`(?i)\bDROP\s+CONSTRAINT\s+(?:IF\s+EXISTS\s+)?([a-zA-Z0-9_"]+)`)
	lineComment = regexp.MustCompile(`--[^\n]*`)
)

// upSection is the goose Up part of a migration, without line comments.
func upSection(body string) string {
	if i := strings.Index(body, "-- +goose Down"); i >= 0 {
		body = body[:i]
	}
	return lineComment.ReplaceAllString(body, "")
}

// bareName is an identifier without its schema and quotes.
func bareName(s string) string {
	s = strings.Trim(s, `"`)
	if i := strings.LastIndex(s, "."); i >= 0 {
		s = s[i+1:]
	}
	return strings.ToLower(strings.Trim(s, `"`))
}

// footprints returns, for each migration file of fsys (in version order),
// the objects that show it was applied.
func footprints(fsys fs.FS) ([]string, map[string][]schemaObject, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(names, func(i, j int) bool { return versionOf(names[i]) < versionOf(names[j]) })
	created := map[schemaObject][]int{} // object -> migrations creating it
	dropped := map[schemaObject][]int{}
	perFile := make([][]schemaObject, len(names))
	for i, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, err
		}
		up := upSection(string(b))
		seen := map[schemaObject]bool{}
		add := func(o schemaObject) {
			if !seen[o] {
				seen[o] = true
				created[o] = append(created[o], i)
				perFile[i] = append(perFile[i], o)
			}
		}
		for _, m := range createObjRe.FindAllStringSubmatch(up, -1) {
			add(schemaObject{kind: strings.ToLower(m[1]), name: bareName(m[2])})
		}
		for _, m := range addColRe.FindAllStringSubmatch(up, -1) {
			add(schemaObject{kind: "column", name: bareName(m[1])})
		}
		for _, m := range addConRe.FindAllStringSubmatch(up, -1) {
			add(schemaObject{kind: "constraint", name: bareName(m[1])})
		}
		for _, m := range dropObjRe.FindAllStringSubmatch(up, -1) {
			o := schemaObject{kind: strings.ToLower(m[1]), name: bareName(m[2])}
			dropped[o] = append(dropped[o], i)
		}
		for _, m := range dropColRe.FindAllStringSubmatch(up, -1) {
			o := schemaObject{kind: "column", name: bareName(m[1])}
			dropped[o] = append(dropped[o], i)
		}
		for _, m := range dropConRe.FindAllStringSubmatch(up, -1) {
			o := schemaObject{kind: "constraint", name: bareName(m[1])}
			dropped[o] = append(dropped[o], i)
		}
	}
	out := map[string][]schemaObject{}
	for i, n := range names {
		for _, o := range perFile[i] {
			if len(created[o]) != 1 {
				continue // created again later (or before): no proof of this one
			}
			last := -1
			for _, d := range dropped[o] {
				last = max(last, d)
			}
			switch {
			case last < i:
				// Never dropped, or dropped before this migration created
				// it again.
				out[n] = append(out[n], o)
			case last > i:
				// Dropped by a later migration: present until that one is
				// applied (migrations apply in order).
				out[n] = append(out[n], schemaObject{kind: o.kind, name: o.name, until: names[last]})
			}
		}
	}
	// Drops: migration i's proof is also an object gone for good, i.e.
	// created only by migrations before i and dropped last by i.
	gone := make([][]schemaObject, len(names))
	for o, ds := range dropped {
		i := slices.Max(ds)
		if len(created[o]) == 0 || slices.Max(created[o]) >= i {
			continue // never created by a migration (nothing to tell), or created again
		}
		gone[i] = append(gone[i], schemaObject{kind: o.kind, name: o.name, absent: true})
	}
	for i, n := range names {
		sort.Slice(gone[i], func(a, b int) bool {
			return gone[i][a].kind+" "+gone[i][a].name < gone[i][b].kind+" "+gone[i][b].name
		})
		out[n] = append(out[n], gone[i]...)
	}
	return names, out, nil
}

// footprintStatus is, per migration of fsys, whether the table relation
// has its footprint: "applied", "missing", or "unknown" for a migration that
// leaves none.
type footprintStatus struct {
	names   []string
	state   map[string]string
	missing []string
	tables  []string // goose version tables in the database
}

func readFootprint(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, relation string) (footprintStatus, error) {
	names, fp, err := footprints(fsys)
	if err != nil {
		return footprintStatus{}, err
	}
	var kinds, objs []string
	for _, n := range names {
		for _, o := range fp[n] {
			kinds, objs = append(kinds, o.kind), append(objs, o.name)
		}
	}
	rows, err := opsdb.New(pool).OutboxSchemaObjects(ctx, opsdb.OutboxSchemaObjectsParams{Kinds: kinds, Names: objs, Relation: relation})
	if err != nil {
		return footprintStatus{}, err
	}
	present := map[schemaObject]bool{}
	for _, r := range rows {
		present[schemaObject{kind: r.Kind, name: r.Name}] = r.Present
	}
	st := footprintStatus{names: names, state: map[string]string{}}
	// Last to first: an object a later migration drops proves an earlier
	// one by its presence, or by the later one's being applied.
	for i := len(names) - 1; i >= 0; i-- {
		n := names[i]
		if len(fp[n]) == 0 {
			st.state[n] = "unknown"
			continue
		}
		st.state[n] = "applied"
		for _, o := range fp[n] {
			has := present[schemaObject{kind: o.kind, name: o.name}]
			if o.until != "" && !has && st.state[o.until] == "applied" {
				continue
			}
			if has == o.absent {
				st.state[n] = "missing"
			}
		}
	}
	for _, n := range names {
		if st.state[n] == "missing" {
			st.missing = append(st.missing, n)
		}
	}
	st.tables, err = opsdb.New(pool).OutboxGooseVersionTables(ctx)
	return st, err
}

// describe is the first lines migrate status prints for such a table.
func (st footprintStatus) describe(relation, versionTable string, latest int64) string {
	var b strings.Builder
	histories := "none found"
	if len(st.tables) > 0 {
		histories = strings.Join(st.tables, ", ")
	}
	fmt.Fprintf(&b, "table %s: migrated outside pgoutbox's version table %s (through your application's goose history, or by hand); goose version tables in this database: %s\n", relation, versionTable, histories)
	fmt.Fprintf(&b, "read from the table's columns, indexes, functions and triggers: %d of this build's %d migrations present", len(st.names)-len(st.missing), len(st.names))
	if len(st.missing) == 0 {
		fmt.Fprintf(&b, " (this build: %d, up to date)\n", latest)
	} else {
		fmt.Fprintf(&b, "; missing %s: copy them with `pgoutbox init --upgrade` (the same flags as the first init) and apply them with the migrator that applied the others\n", strings.Join(st.missing, ", "))
	}
	return b.String()
}
