package main

import (
	"strings"
	"testing"
)

// The SQL ceiling runs the contract's statements verbatim through pgbench,
// one line each: comments inside a statement (OutboxMarkDoneMany's CTE has
// some, with a ";" in them) must go before the statement's end is found.
func TestQuerySQL_WholeStatementWithoutComments(t *testing.T) {
	for name, end := range map[string]string{
		"OutboxMarkDoneMany": "FROM done",
		"OutboxClaimWindow":  "FROM claimed AS c",
	} {
		q := querySQL(name)
		if strings.Contains(q, "--") || strings.Contains(q, ";") || !strings.Contains(q, end) {
			t.Errorf("querySQL(%q) is not the whole statement without comments:\n%s", name, q)
		}
	}
}

// Every parameter of the ceiling's script is replaced by a literal or a
// pgbench variable: a parameter added to a query must be added there too.
func TestPgbenchScript_NoParameterLeft(t *testing.T) {
	for _, kind := range []string{ceilingDispatcher, ceilingClaimOnly} {
		if s := pgbenchScript(100, kind); strings.Contains(s, "@") {
			t.Fatalf("the %s ceiling's pgbench script still holds a sqlc parameter:\n%s", kind, s)
		}
	}
}
