package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// run over several databases: --database-url repeated and databases found
// by --discover-query, one added while it runs; each database's events
// carry the source its --ce-source template gives; /metrics labels every
// counter with the database and /healthz names a database it cannot serve.
func TestRun_SeveralDatabasesWithDiscovery(t *testing.T) {
	t.Parallel()
	a, b, c := newDB(t), newDB(t), newDB(t)
	// The discovery query reads a tenants table of a's.
	a.exec(t, "CREATE TABLE tenants (name text)")
	nameOf := func(d *testDB) string { return strings.TrimPrefix(mustParseURL(t, d.url).Path, "/") }
	for _, d := range []*testDB{a, b, c} {
		d.enqueue(t, 2, "OrderPaid", "o-1", false)
	}
	run := start(t, invocation{}, "run", "--publisher", "stdout", "--stdout-cloudevents",
		"--database-url", a.url, "--database-url", b.url,
		"--discover-databases", a.url, "--discover-query", "SELECT name FROM tenants", "--discover-interval", "50ms",
		"--ce-source", "urn:test:{{.Database}}", "--metrics-addr", "127.0.0.1:0", "--wake", "poll", "--poll-max", "200ms")
	base := run.metricsURL(t)
	eventually(t, time.Minute, "a's and b's events done", func() bool {
		return a.count(t, "status = 'done'") == 2 && b.count(t, "status = 'done'") == 2
	})
	if n := c.count(t, "status = 'done'"); n != 0 {
		t.Errorf("c is not listed yet, but %d of its events are done", n)
	}
	a.exec(t, "INSERT INTO tenants VALUES ($1)", nameOf(c))
	eventually(t, time.Minute, "c found and its events done", func() bool { return c.count(t, "status = 'done'") == 2 })
	eventually(t, 30*time.Second, "healthz ok", func() bool {
		code, body := get(t, base+"/healthz")
		return code == http.StatusOK && body == "ok\n"
	})
	var text string
	eventually(t, 30*time.Second, "per-database counters", func() bool {
		_, text = get(t, base+"/metrics")
		s := checkExposition(t, text)
		for _, d := range []*testDB{a, b, c} {
			if s[`pgoutbox_messages_published_total{database="`+nameOf(d)+`"}`] != 2 ||
				s[`pgoutbox_database_up{database="`+nameOf(d)+`"}`] != 1 {
				return false
			}
		}
		return true
	})
	// The dispatcher's own instruments move apart from the fleet's
	// counters (a scrape can fall between the two): wait for them too.
	eventually(t, 30*time.Second, "the dispatcher's own instruments labelled with the database", func() bool {
		_, text = get(t, base+"/metrics")
		return strings.Contains(text, `pgoutbox_messages_outcomes_total{database="`+nameOf(c)+`",outcome="published"} 2`)
	})
	// A database that is dropped from under it: /healthz names it.
	a.exec(t, "INSERT INTO tenants VALUES ('pgoutbox_no_such_database')")
	eventually(t, time.Minute, "healthz names the missing database", func() bool {
		code, body := get(t, base+"/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "database pgoutbox_no_such_database: database does not exist")
	})
	r := run.stop(t)
	wantCode(t, r, ExitOK)
	sources := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var l struct {
			CE map[string]string `json:"ce"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		sources[l.CE["source"]]++
	}
	for _, d := range []*testDB{a, b, c} {
		if sources["urn:test:"+nameOf(d)] != 2 {
			t.Errorf("source urn:test:%s on %d lines, want 2: %v", nameOf(d), sources["urn:test:"+nameOf(d)], sources)
		}
	}
	mustContain(t, r, "stderr", `msg="pgoutbox run stopped" databases=4 published=6`)
}

func TestRun_SeveralDatabasesFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--database-url", "postgres://h/a", "--database-url", "postgres://h/b", "--ce-source", "urn:x"}, "--ce-source must be a template"},
		{[]string{"--database-url", "postgres://h/a", "--database-url", "postgres://h/a"}, "URL #2 names h:5432/a again"},
		{[]string{"--discover-databases", "postgres://h/postgres"}, "needs --discover-pattern or --discover-query"},
		{[]string{"--discover-pattern", "t_%"}, "need --discover-databases"},
		{[]string{"--database-url", "postgres://h/a", "--database-url", "postgres://h/b", "--wake", "sometimes"}, `--wake "sometimes"`},
		{[]string{"--database-url", "postgres://h/a", "--database-url", "postgres://h/b", "--listen-url", "postgres://h/a"}, "--listen-url names one database"},
	} {
		r := call(t, invocation{}, append([]string{"run", "--publisher", "discard"}, tc.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: want exit 2 with %q\n%s", tc.args, tc.want, r)
		}
	}
}
