// Package sqlrename is the SQL rewriter behind `pgoutbox init` and the
// dispatcher's Config.Table/Config.Schema: it renames the table outbox and
// every name derived from it, token by token, so that only whole identifiers
// change (never "outbox" inside a longer word) and string literals, quoted
// identifiers, comments and dollar-quoted bodies are each handled as what
// they are. With a schema, references to the table and calls of its
// functions are schema-qualified; names PostgreSQL creates in the table's
// schema anyway (indexes, triggers) and column qualifiers (outbox.id) are not.
package sqlrename

import (
	"fmt"
	"regexp"
	"strings"
)

// Rename maps the table name outbox (in the search_path) to another name,
// optionally in a schema.
type Rename struct {
	table  string // billing_outbox
	camel  string // BillingOutbox
	schema string // hr, or "" for unqualified
}

// New returns the Rename for table (validated with ValidateTable) in schema
// ("" = unqualified, resolved through the search_path; otherwise validated
// with ValidateSchema).
func New(table, schema string) (Rename, error) {
	if err := ValidateTable(table); err != nil {
		return Rename{}, err
	}
	if schema != "" {
		if err := ValidateSchema(schema); err != nil {
			return Rename{}, err
		}
	}
	return Rename{table: table, camel: CamelCase(table), schema: schema}, nil
}

// Table is the new table name, Camel its CamelCase form (query names),
// Schema the schema ("" = unqualified).
func (r Rename) Table() string  { return r.table }
func (r Rename) Camel() string  { return r.camel }
func (r Rename) Schema() string { return r.schema }

// Identity reports a rename that changes nothing (outbox, no schema).
func (r Rename) Identity() bool { return r.table == "outbox" && r.schema == "" }

// Qualified is the table name as SQL code refers to it: schema.table or table.
func (r Rename) Qualified() string {
	if r.schema == "" {
		return r.table
	}
	return r.schema + "." + r.table
}

// ident renames an identifier in SQL code (or a string literal holding
// exactly an identifier): outbox -> table, outbox_x -> table_x,
// OutboxX -> CamelX. Unquoted SQL identifiers are case-insensitive.
func (r Rename) ident(w string) string {
	lw := strings.ToLower(w)
	switch {
	case lw == "outbox":
		return r.table
	case strings.HasPrefix(lw, "outbox_"):
		return r.table + w[len("outbox"):]
	case isQueryName(w):
		return r.camel + w[len("Outbox"):]
	}
	return w
}

// derived reports a name the rename applies to: outbox, outbox_*, OutboxX.
// With the default table name ident leaves it as it is, but a schema still
// qualifies it.
func derived(w string) bool {
	lw := strings.ToLower(w)
	return lw == "outbox" || strings.HasPrefix(lw, "outbox_") || isQueryName(w)
}

// OutboxTables are the tables of the outbox's migrations: the outbox and
// the tables beside it, named after it. With a schema, code that names one
// of them is qualified, as it is for the outbox itself.
var OutboxTables = []string{"outbox", "outbox_attempts", "outbox_delivered", "outbox_relays", "outbox_sequenced"}

// isOutboxTable reports whether w names one of OutboxTables.
func isOutboxTable(w string) bool {
	for _, t := range OutboxTables {
		if strings.EqualFold(w, t) {
			return true
		}
	}
	return false
}

// commentIdent renames identifiers mentioned in comments (query names such
// as OutboxClaim in "-- name: OutboxClaim :many", index and trigger names),
// but keeps the plain word "outbox" of the prose.
func (r Rename) commentIdent(w string) string {
	if strings.EqualFold(w, "outbox") {
		return w
	}
	return r.ident(w)
}

// isQueryName reports Outbox followed by an upper-case letter (OutboxClaim).
func isQueryName(w string) bool {
	return len(w) > len("Outbox") && strings.HasPrefix(w, "Outbox") && w[6] >= 'A' && w[6] <= 'Z'
}

var (
	dollarTag  = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)
	plainIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// dottedName is a string literal holding a qualified name such as
	// 'public.outbox' or a setting name such as 'outbox.notified_at'.
	dottedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)
)

// nameParts applies fn to a string literal's content when it is a name
// (plain or dotted, each part on its own) and returns it unchanged otherwise.
func nameParts(s string, fn func(string) string) string {
	if plainIdent.MatchString(s) {
		return fn(s)
	}
	if !dottedName.MatchString(s) {
		return s
	}
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = fn(p)
	}
	return strings.Join(parts, ".")
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }
func isWordChar(c byte) bool   { return isIdentStart(c) || c >= '0' && c <= '9' }

// identCtx is what surrounds an identifier in code.
type identCtx struct {
	afterDot    bool // schema.outbox: already qualified
	beforeDot   bool // outbox.id: a qualifier
	beforeParen bool // outbox_notify(): a function call or signature
	// searched: the name is looked up through the search_path, not created
	// beside the table: a sequence (CREATE/ALTER/DROP SEQUENCE name), an
	// index being dropped (DROP INDEX name), or the table of
	// OWNED BY outbox.seq.
	searched bool
}

// strCtx is what surrounds a string literal in code.
type strCtx struct {
	// object: the literal names a relation or function that PostgreSQL
	// resolves through the search_path: 'x'::regclass, 'x'::regproc, or the
	// first argument of nextval/setval/currval/to_regclass/to_regproc.
	// Other literals (a NOTIFY channel, a setting name) are plain text.
	object bool
}

// objectCallees take a relation or function name as their first argument.
var objectCallees = map[string]bool{
	"nextval": true, "setval": true, "currval": true, "to_regclass": true, "to_regproc": true,
	"to_regprocedure": true, "pg_get_serial_sequence": true, "pg_sequence_last_value": true, "outbox_sequence_next": true,
}

// searchedAfter reports whether an identifier that follows the code words
// prev (most recent last) names an object found through the search_path.
func searchedAfter(prev []string) bool {
	at := func(k int) string {
		if k < len(prev) {
			return prev[len(prev)-1-k]
		}
		return ""
	}
	switch {
	case at(0) == "sequence":
		return true
	case at(0) == "exists" && at(1) == "if" && at(2) == "sequence":
		return true
	case at(0) == "index" && at(1) == "drop":
		return true
	case at(0) == "exists" && at(1) == "if" && at(2) == "index" && at(3) == "drop":
		return true
	case at(0) == "concurrently" && at(1) == "index" && at(2) == "drop":
		return true
	case at(0) == "exists" && at(1) == "if" && at(2) == "concurrently" && at(3) == "index" && at(4) == "drop":
		return true
	case at(0) == "by" && at(1) == "owned":
		return true
	}
	return false
}

// sqlVisitor receives each kind of token; it returns the replacement text.
type sqlVisitor struct {
	code    func(ident string, ctx identCtx) string // identifier in code
	comment func(word string) string                // word in a comment
	str     func(content string, ctx strCtx) string
	quoted  func(content string) string // "quoted identifier"
}

// walkSQL rewrites src token by token.
func walkSQL(src string, v sqlVisitor) string {
	var out strings.Builder
	n := len(src)
	var words []string  // the last code words, lower-cased, most recent last
	lastCode := byte(0) // the last non-space character of code
	for i := 0; i < n; {
		c := src[i]
		switch {
		case c == '-' && i+1 < n && src[i+1] == '-':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = n
			} else {
				j += i
			}
			out.WriteString(mapWords(src[i:j], v.comment))
			i = j
		case c == '/' && i+1 < n && src[i+1] == '*':
			depth, j := 1, i+2
			for j < n && depth > 0 {
				switch {
				case strings.HasPrefix(src[j:], "/*"):
					depth++
					j += 2
				case strings.HasPrefix(src[j:], "*/"):
					depth--
					j += 2
				default:
					j++
				}
			}
			out.WriteString(mapWords(src[i:j], v.comment))
			i = j
		case c == '\'' || c == '"':
			j := i + 1
			for j < n {
				if src[j] == c {
					if j+1 < n && src[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= n { // unterminated: copy as is
				out.WriteString(src[i:])
				return out.String()
			}
			content := src[i+1 : j]
			if c == '\'' {
				ctx := strCtx{}
				rest := src[j+1:]
				for _, cast := range []string{"::regclass", "::regprocedure", "::regproc"} {
					if strings.HasPrefix(rest, cast) {
						ctx.object = true
					}
				}
				if lastCode == '(' && len(words) > 0 && objectCallees[words[len(words)-1]] {
					ctx.object = true
				}
				content = v.str(content, ctx)
			} else {
				content = v.quoted(content)
			}
			out.WriteByte(c)
			out.WriteString(content)
			out.WriteByte(c)
			lastCode = c
			i = j + 1
		case c == '$':
			tag := dollarTag.FindString(src[i:])
			if tag == "" { // $1 or a stray $
				out.WriteByte(c)
				i++
				continue
			}
			end := strings.Index(src[i+len(tag):], tag)
			if end < 0 {
				out.WriteString(src[i:])
				return out.String()
			}
			body := src[i+len(tag) : i+len(tag)+end]
			out.WriteString(tag)
			out.WriteString(walkSQL(body, v)) // a function body is code
			out.WriteString(tag)
			i += 2*len(tag) + end
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentChar(src[j]) {
				j++
			}
			k := j
			for k < n && (src[k] == ' ' || src[k] == '\t' || src[k] == '\n' || src[k] == '\r') {
				k++
			}
			ctx := identCtx{
				afterDot:    i > 0 && src[i-1] == '.',
				beforeDot:   j < n && src[j] == '.',
				beforeParen: k < n && src[k] == '(',
				searched:    searchedAfter(words),
			}
			out.WriteString(v.code(src[i:j], ctx))
			words = append(words, strings.ToLower(src[i:j]))
			if len(words) > 5 { // the longest form searchedAfter reads: DROP INDEX CONCURRENTLY IF EXISTS
				words = words[1:]
			}
			lastCode = src[j-1]
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < n && (isWordChar(src[j]) || src[j] == '.') {
				j++
			}
			out.WriteString(src[i:j])
			lastCode = src[j-1]
			i = j
		default:
			out.WriteByte(c)
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				lastCode = c
			}
			i++
		}
	}
	return out.String()
}

// mapWords applies fn to every word ([A-Za-z_][A-Za-z0-9_]*) of text that is
// not part of a longer run of word characters.
func mapWords(text string, fn func(string) string) string {
	var out strings.Builder
	n := len(text)
	for i := 0; i < n; {
		if !isWordChar(text[i]) {
			out.WriteByte(text[i])
			i++
			continue
		}
		j := i + 1
		for j < n && isWordChar(text[j]) {
			j++
		}
		w := text[i:j]
		if isIdentStart(w[0]) {
			w = fn(w)
		}
		out.WriteString(w)
		i = j
	}
	return out.String()
}

// SQL rewrites one SQL text for r and returns the identifiers it produced
// in code (to check their length: PostgreSQL truncates names at 63 bytes).
func (r Rename) SQL(src string) (string, []string) {
	var produced []string
	plain := func(w string) string {
		out := r.ident(w)
		if out != w {
			produced = append(produced, out)
		}
		return out
	}
	code := func(w string, ctx identCtx) string {
		out := plain(w)
		if !derived(w) || r.schema == "" || ctx.afterDot {
			return out
		}
		// The table itself, functions and sequences derived from it, and
		// an index being dropped are found through the search_path: they
		// take the schema. Index and trigger names in CREATE are created in
		// the table's schema and take no qualifier; a column qualifier
		// (outbox.id) takes none, except the table of OWNED BY outbox.seq.
		if ctx.beforeDot && !ctx.searched {
			return out
		}
		if ctx.searched || isOutboxTable(w) ||
			(ctx.beforeParen && strings.HasPrefix(strings.ToLower(w), "outbox_")) {
			return r.schema + "." + out
		}
		return out
	}
	str := func(s string, ctx strCtx) string {
		out := nameParts(s, plain)
		// 'outbox_seq' in nextval(...), 'outbox'::regclass: an object
		// name PostgreSQL resolves through the search_path. A NOTIFY channel
		// or a setting name ('outbox.wake_queued') stays as it is.
		if ctx.object && r.schema != "" && derived(s) && plainIdent.MatchString(s) {
			return r.schema + "." + out
		}
		return out
	}
	out := walkSQL(src, sqlVisitor{
		code:    code,
		comment: r.commentIdent,
		str:     str,
		quoted:  plain,
	})
	return out, produced
}

// Leftovers lists the names derived from "outbox" that remain in src: in
// code and string literals any outbox, outbox_*, Outbox*; in comments
// outbox_* and Outbox* (the plain word is prose). Names that start with the
// new table name (or its CamelCase form) are not leftovers.
func Leftovers(src, table, camel string) []string {
	var found []string
	isNew := func(w string) bool {
		return strings.HasPrefix(strings.ToLower(w), table) || strings.HasPrefix(w, camel)
	}
	check := func(w string, prose bool) string {
		lw := strings.ToLower(w)
		old := (lw == "outbox" && !prose) || strings.HasPrefix(lw, "outbox_") || isQueryName(w)
		if old && !isNew(w) {
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

// CamelCase turns billing_outbox into BillingOutbox.
func CamelCase(s string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(s, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

var tableNameRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// reservedWords are PostgreSQL's reserved key words (the "reserved" and
// "reserved (can be function or type)" rows of the key word appendix): they
// cannot be a table name without quoting. Non-reserved key words are valid
// table names and are accepted.
var reservedWords = map[string]bool{}

func init() {
	for w := range strings.FieldsSeq(`all analyse analyze and any array as asc asymmetric authorization binary both
		case cast check collate collation column concurrently constraint create cross current_catalog current_date
		current_role current_schema current_time current_timestamp current_user default deferrable desc distinct do
		else end except false fetch for foreign freeze from full grant group having ilike in initially inner
		intersect into is isnull join lateral leading left like limit localtime localtimestamp natural not notnull
		null offset on only or order outer overlaps placing primary references returning right select session_user
		similar some symmetric system_user table tablesample then to trailing true union unique user using
		variadic verbose when where window with`) {
		reservedWords[w] = true
	}
}

// ValidateTable checks a table name: every identifier built from it is then
// safe to splice into SQL.
func ValidateTable(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("--table is required (for example --table billing_outbox)")
	case !tableNameRe.MatchString(name):
		return fmt.Errorf("invalid --table %q: use 1-63 characters among lower-case letters, digits and '_', not starting with a digit", name)
	case reservedWords[name]:
		return fmt.Errorf("invalid --table %q: it is a reserved SQL key word; choose another name (such as %s_outbox)", name, name)
	case strings.HasPrefix(name, "pg_"):
		return fmt.Errorf("invalid --table %q: the pg_ prefix is reserved for PostgreSQL's system names", name)
	}
	if c := CamelCase(name); c == "" || !(c[0] >= 'A' && c[0] <= 'Z') {
		return fmt.Errorf("invalid --table %q: the query names are built from its CamelCase form (%q), which must start with a letter", name, c)
	}
	return nil
}

// ValidateSchema checks a schema name the same way (no reserved words, no
// pg_ prefix: pg_catalog and pg_temp are not places for an outbox).
func ValidateSchema(name string) error {
	switch {
	case !tableNameRe.MatchString(name):
		return fmt.Errorf("invalid --schema %q: use 1-63 characters among lower-case letters, digits and '_', not starting with a digit", name)
	case reservedWords[name]:
		return fmt.Errorf("invalid --schema %q: it is a reserved SQL key word", name)
	case strings.HasPrefix(name, "pg_") || name == "information_schema":
		return fmt.Errorf("invalid --schema %q: a system schema", name)
	}
	return nil
}
