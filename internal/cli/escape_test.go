package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// Hostile values as a producer could store them with a plain INSERT.
const (
	hostileAggregate = "o-1\x1b[2J\x1b]0;pwned\x07\x1b[8mhidden"
	hostileEventType = "Order\u202ePaid\u200b"
	hostileError     = "boom\x1b[2J \u009b31m red\x7f\n\tat line 2"
)

func TestEscape_ShowsControlAndFormatCharactersEscaped(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"o-1", "o-1"},
		{"Bestellung für Jürgen 注文", "Bestellung für Jürgen 注文"},
		{"\x1b[2J", `\x1b[2J`},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`},
		{"\x1b[8mhidden", `\x1b[8mhidden`},
		{"a\tb\nc\rd\x00e\x7f", `a\tb\nc\rd\x00e\x7f`},
		{"\u009b31m", `\u009b31m`},                 // C1 CSI
		{"\u0085", `\u0085`},                       // C1 NEL
		{"evil\u202etxt.exe", `evil\u202etxt.exe`}, // right-to-left override
		{"\u2066x\u2069", `\u2066x\u2069`},         // bidi isolates
		{"a\u200bb\u200dc\ufeffd", `a\u200bb\u200dc\ufeffd`},
		{"no\u00a0break", `no\u00a0break`},
		{"line\u2028sep", `line\u2028sep`},
		{"\U000e0041tag", `\U000e0041tag`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`back\slash`, `back\\slash`},
		{`\x1b`, `\\x1b`}, // a literal backslash-x cannot pass for an escape
	}
	for _, tt := range tests {
		if got := escape(tt.in); got != tt.want {
			t.Errorf("escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := cell("\x1b[2J\x1b[2J\x1b[2J", 10); got != `\x1b[2J\x…` {
		t.Errorf("cell = %q", got)
	}
	if got := textCell("line 1\n\tline 2 \x1b[8m", 80); got != `line 1 line 2 \x1b[8m` {
		t.Errorf("textCell = %q", got)
	}
	if got := message("no such id \x1b[2J\nhint: contains \\u0000"); got != "no such id \\x1b[2J\nhint: contains \\u0000" {
		t.Errorf("message = %q", got)
	}
}

// assertInert fails if out contains anything a terminal would interpret or
// hide: C0 other than newline, DEL, C1, bidi controls, zero-width characters.
func assertInert(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		bad := (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
			(r >= 0x200b && r <= 0x200f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0xfeff ||
			(r == utf8.RuneError)
		if bad {
			t.Fatalf("%s contains %U at byte %d:\n%q", what, r, i, out)
		}
	}
}

func TestDeadListAndStats_ShowHostileValuesEscapedAndJSONExact(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	var id int64
	err := d.pool.QueryRow(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
		VALUES ('order', $1, $2, '{}', true) RETURNING id`, hostileAggregate, hostileEventType).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	d.exec(t, `SELECT outbox_resolve_heads(100)`) // as a relay does before its ordered claims
	d.exec(t, `UPDATE outbox SET status = 'dead', attempts = 12, last_error = $2 WHERE id = $1`, id, hostileError)

	for _, args := range [][]string{{"dead", "list"}, {"stats"}} {
		r := call(t, invocation{env: d.env()}, args...)
		wantCode(t, r, ExitOK)
		assertInert(t, strings.Join(args, " ")+" stdout", r.stdout)
		assertInert(t, strings.Join(args, " ")+" stderr", r.stderr)
		for _, want := range []string{`o-1\x1b[2J\x1b]0;pwned\x07\x1b[8mhidden`, `Order\u202ePaid\u200b`, `boom\x1b[2J \u009b31m red\x7f at line 2`} {
			mustContain(t, r, "stdout", want)
		}
	}

	// --json stays exact: the stored values, JSON-encoded.
	r := call(t, invocation{env: d.env()}, "dead", "list", "--json")
	wantCode(t, r, ExitOK)
	var page struct {
		Messages []struct {
			AggregateID string  `json:"aggregate_id"`
			EventType   string  `json:"event_type"`
			LastError   *string `json:"last_error"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if len(page.Messages) != 1 || page.Messages[0].AggregateID != hostileAggregate || page.Messages[0].EventType != hostileEventType ||
		page.Messages[0].LastError == nil || *page.Messages[0].LastError != hostileError {
		t.Fatalf("--json does not carry the exact values: %+v", page)
	}
	r = call(t, invocation{env: d.env()}, "stats", "--json")
	wantCode(t, r, ExitOK)
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if len(rep.Blocked) != 1 || rep.Blocked[0].AggregateID != hostileAggregate || rep.Blocked[0].HeadEventType != hostileEventType {
		t.Fatalf("stats --json does not carry the exact values: %+v", rep.Blocked)
	}
}

func TestErrors_EchoingInputShowItEscaped(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	for _, args := range [][]string{
		{"dead", "list", "--\x1b[2J"},
		{"dead", "retry", "\x1b]0;pwned\x07"},
		{"dead", "skip", "--reason", "r", "1\x1b[8m"},
		{"stats", "--stalled-after", "\x1b[2J"},
		{"purge", "--older-than", "\u202e7d"},
	} {
		r := call(t, invocation{env: d.env()}, args...)
		if r.code == ExitOK {
			t.Errorf("%q exited 0", args)
		}
		assertInert(t, strings.Join(args, " ")+" stderr", r.stderr)
		assertInert(t, strings.Join(args, " ")+" stdout", r.stdout)
	}
}
