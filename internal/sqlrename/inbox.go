package sqlrename

import "strings"

// Tables is the renaming of SQL written for a family of tables other than
// the outbox, named after one base word: the inbox's tables inbox,
// inbox_aggregates and inbox_gaps, their indexes (inbox_parked, ...) and
// query names (InboxRecord, ...). Every identifier equal to the base or
// starting with base_ is renamed; with a schema, the family's tables are
// qualified wherever code names them (never an index, a constraint or a
// column qualifier). Comments keep the plain word as prose.
type Tables struct {
	base, baseCamel string   // inbox, Inbox
	tables          []string // the base's table names: inbox, inbox_aggregates, ...
	table, camel    string   // billing_inbox, BillingInbox
	schema          string
}

// InboxTables are the tables of package inbox, as its migrations name them.
var InboxTables = []string{"inbox", "inbox_aggregates", "inbox_gaps"}

// NewTables returns the renaming of the table family of base (whose tables
// are tables, base first) to table (validated with ValidateTable) in schema
// ("" = unqualified, resolved through the search_path).
func NewTables(base string, tables []string, table, schema string) (Tables, error) {
	if err := ValidateTable(table); err != nil {
		return Tables{}, err
	}
	if schema != "" {
		if err := ValidateSchema(schema); err != nil {
			return Tables{}, err
		}
	}
	return Tables{base: base, baseCamel: CamelCase(base), tables: tables, table: table, camel: CamelCase(table), schema: schema}, nil
}

// Table is the new base table name, Camel its CamelCase form (query names),
// Schema the schema ("" = unqualified).
func (r Tables) Table() string  { return r.table }
func (r Tables) Camel() string  { return r.camel }
func (r Tables) Schema() string { return r.schema }

// Identity reports a renaming that changes nothing.
func (r Tables) Identity() bool { return r.table == r.base && r.schema == "" }

// Qualified is the base table as SQL code refers to it: schema.table or
// table.
func (r Tables) Qualified() string {
	if r.schema == "" {
		return r.table
	}
	return r.schema + "." + r.table
}

// ident renames an identifier: base -> table, base_x -> table_x,
// BaseX -> CamelX.
func (r Tables) ident(w string) string {
	lw := strings.ToLower(w)
	switch {
	case lw == r.base:
		return r.table
	case strings.HasPrefix(lw, r.base+"_"):
		return r.table + w[len(r.base):]
	case r.isQueryName(w):
		return r.camel + w[len(r.baseCamel):]
	}
	return w
}

func (r Tables) isQueryName(w string) bool {
	n := len(r.baseCamel)
	return len(w) > n && strings.HasPrefix(w, r.baseCamel) && w[n] >= 'A' && w[n] <= 'Z'
}

// isTable reports whether an identifier (before renaming) names one of the
// family's tables.
func (r Tables) isTable(w string) bool {
	lw := strings.ToLower(w)
	for _, t := range r.tables {
		if lw == t {
			return true
		}
	}
	return false
}

// SQL rewrites one SQL text and returns the identifiers it produced in code
// (to check their length: PostgreSQL truncates names at 63 bytes).
func (r Tables) SQL(src string) (string, []string) {
	var produced []string
	plain := func(w string) string {
		out := r.ident(w)
		if out != w {
			produced = append(produced, out)
		}
		return out
	}
	out := walkSQL(src, sqlVisitor{
		code: func(w string, ctx identCtx) string {
			out := plain(w)
			if r.schema != "" && r.isTable(w) && !ctx.afterDot && !ctx.beforeDot {
				return r.schema + "." + out
			}
			return out
		},
		comment: func(w string) string {
			if strings.EqualFold(w, r.base) {
				return w
			}
			return r.ident(w)
		},
		str: func(s string, ctx strCtx) string {
			out := nameParts(s, plain)
			if ctx.object && r.schema != "" && r.isTable(s) {
				return r.schema + "." + out // 'inbox'::regclass
			}
			return out
		},
		quoted: plain,
	})
	return out, produced
}

// Leftovers lists the names of the base family that remain in src after
// renaming: in code and string literals the base word, base_* and Base*;
// in comments base_* and Base* (the plain word is prose). Names that start
// with the new table name (or its CamelCase form) are not leftovers.
func (r Tables) Leftovers(src string) []string {
	var found []string
	check := func(w string, prose bool) string {
		lw := strings.ToLower(w)
		old := (lw == r.base && !prose) || strings.HasPrefix(lw, r.base+"_") || r.isQueryName(w)
		if old && !strings.HasPrefix(lw, r.table) && !strings.HasPrefix(w, r.camel) {
			found = append(found, w)
		}
		return w
	}
	walkSQL(src, sqlVisitor{
		code:    func(w string, _ identCtx) string { return check(w, false) },
		comment: func(w string) string { return check(w, true) },
		str: func(s string, _ strCtx) string {
			nameParts(s, func(w string) string { return check(w, false) })
			return s
		},
		quoted: func(s string) string { return check(s, false) },
	})
	return found
}
