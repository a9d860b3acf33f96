package cli

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// sqlc.yaml is edited as text, not through a YAML library, so that the
// user's comments, order and layout stay exactly as they were: init only
// appends one list item under the top-level "sql:" key, or list lines under
// the "schema:" key of the item it wrote before.

var (
	sqlKeyRe     = regexp.MustCompile(`^sql:\s*(#.*)?$`)
	queriesKeyRe = regexp.MustCompile(`^\s*(?:-\s+)?queries:\s*["']?([^"'#\s]+)["']?`)
	schemaListRe = regexp.MustCompile(`^(\s*)(?:-\s+)?schema:\s*(#.*)?$`)
	listItemRe   = regexp.MustCompile(`^(\s*)-\s+["']?([^"'#\s]+)["']?`)
)

// errNoSQLList is returned for a config without a top-level "sql:" list.
var errNoSQLList = errors.New(`no top-level "sql:" list`)

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

func blankOrComment(s string) bool {
	t := strings.TrimSpace(s)
	return t == "" || strings.HasPrefix(t, "#")
}

// sqlcItems finds the top-level sql: list: the line index after which items
// start, the items' indentation, each item's first line, and the end of the
// list (exclusive).
func sqlcItems(lines []string) (indent int, starts []int, end int, err error) {
	at := -1
	for i, l := range lines {
		if sqlKeyRe.MatchString(l) {
			at = i
			break
		}
	}
	if at < 0 {
		return 0, nil, 0, errNoSQLList
	}
	indent = -1
	end = len(lines)
	for i := at + 1; i < len(lines); i++ {
		l := lines[i]
		if blankOrComment(l) {
			continue
		}
		in := indentOf(l)
		isItem := strings.HasPrefix(strings.TrimLeft(l, " "), "- ") || strings.TrimSpace(l) == "-"
		if indent < 0 {
			if !isItem {
				return 0, nil, 0, fmt.Errorf("%w: line %d is not a list item", errNoSQLList, i+1)
			}
			indent = in
		}
		if in < indent || (in == 0 && !isItem) {
			end = i
			break
		}
		if in == indent && isItem {
			starts = append(starts, i)
		}
	}
	if indent < 0 {
		indent = 2
	}
	// The list ends after its last line that is not blank.
	for end > at+1 && strings.TrimSpace(lines[end-1]) == "" {
		end--
	}
	return indent, starts, end, nil
}

// sqlcItemFor returns the first and last line (exclusive) of the item whose
// queries: is queries, or -1.
func sqlcItemFor(lines []string, starts []int, end int, queries string) (int, int) {
	for k, s := range starts {
		e := end
		if k+1 < len(starts) {
			e = starts[k+1]
		}
		for _, l := range lines[s:e] {
			if m := queriesKeyRe.FindStringSubmatch(l); m != nil && strings.TrimSuffix(m[1], "/") == strings.TrimSuffix(queries, "/") {
				return s, e
			}
		}
	}
	return -1, -1
}

// sqlcAddItem appends item (a list item written at indentation 2, as
// sqlcEntry writes it) to the sql: list of cfg. It refuses when an item
// already reads queries.
func sqlcAddItem(cfg, item, queries string) (string, error) {
	lines := strings.Split(strings.TrimRight(cfg, "\n"), "\n")
	indent, starts, end, err := sqlcItems(lines)
	if err != nil {
		return "", err
	}
	if s, _ := sqlcItemFor(lines, starts, end, queries); s >= 0 {
		return "", fmt.Errorf("it already has an entry for %s (line %d): run init with --upgrade to bring it up to date", queries, s+1)
	}
	var add []string
	for _, l := range strings.Split(strings.TrimRight(item, "\n"), "\n") {
		switch {
		case strings.TrimSpace(l) == "":
			add = append(add, "")
		case indent >= 2:
			add = append(add, strings.Repeat(" ", indent-2)+l)
		default:
			add = append(add, l[min(2-indent, indentOf(l)):])
		}
	}
	out := append(append(append([]string{}, lines[:end]...), add...), lines[end:]...)
	return strings.Join(out, "\n") + "\n", nil
}

// sqlcAddSchemaFiles adds files to the schema: list of the item that reads
// queries, keeping the list's indentation, and returns the files it added.
// An item whose schema: is one path (a folder) needs nothing.
func sqlcAddSchemaFiles(cfg, queries string, files []string) (string, []string, error) {
	lines := strings.Split(strings.TrimRight(cfg, "\n"), "\n")
	_, starts, end, err := sqlcItems(lines)
	if err != nil {
		return "", nil, err
	}
	s, e := sqlcItemFor(lines, starts, end, queries)
	if s < 0 {
		return "", nil, fmt.Errorf("no entry reads %s: run init without --upgrade to add one", queries)
	}
	key := -1
	for i := s; i < e; i++ {
		if schemaListRe.MatchString(lines[i]) {
			key = i
			break
		}
	}
	if key < 0 {
		return cfg, nil, nil // schema: PATH, a folder (or a file) the user chose
	}
	have := map[string]bool{}
	keyCol := strings.Index(lines[key], "schema:")
	last, itemIndent := key, ""
	for i := key + 1; i < e; i++ {
		if blankOrComment(lines[i]) {
			continue
		}
		m := listItemRe.FindStringSubmatch(lines[i])
		if m == nil || len(m[1]) < keyCol {
			break
		}
		have[m[2]] = true
		last, itemIndent = i, m[1]
	}
	if itemIndent == "" {
		itemIndent = strings.Repeat(" ", keyCol+2)
	}
	var add, added []string
	for _, f := range files {
		if !have[f] {
			add = append(add, itemIndent+"- "+f)
			added = append(added, f)
		}
	}
	if len(add) == 0 {
		return cfg, nil, nil
	}
	out := append(append(append([]string{}, lines[:last+1]...), add...), lines[last+1:]...)
	return strings.Join(out, "\n") + "\n", added, nil
}
