package cli

import (
	"strings"
	"testing"
	"time"
)

// ui over several databases: the fleet overview lists each, and each name
// opens that database's console; a database added to the discovery query
// appears.
func TestUI_SeveralDatabases(t *testing.T) {
	t.Parallel()
	a, b, c := newDB(t), newDB(t), newDB(t)
	a.exec(t, "CREATE TABLE tenants (name text)")
	b.enqueue(t, 3, "OrderPaid", "o-1", false)
	nameOf := func(d *testDB) string { return strings.TrimPrefix(mustParseURL(t, d.url).Path, "/") }
	ui := start(t, invocation{}, "ui", "--addr", "127.0.0.1:0", "--read-only", "--database-url", a.url, "--database-url", b.url,
		"--discover-databases", a.url, "--discover-query", "SELECT name FROM tenants", "--discover-interval", "50ms")
	base := ui.metricsURL(t)
	eventually(t, 30*time.Second, "both databases read", func() bool {
		_, body := get(t, base+"/")
		return strings.Contains(body, `href="/db/`+nameOf(a)+`/"`) && strings.Contains(body, `href="/db/`+nameOf(b)+`/"`) &&
			!strings.Contains(body, "not read yet")
	})
	code, body := get(t, base+"/db/"+nameOf(b)+"/messages")
	if code != 200 || !strings.Contains(body, "OrderPaid") {
		t.Errorf("%s's messages: %d", nameOf(b), code)
	}
	a.exec(t, "INSERT INTO tenants VALUES ($1)", nameOf(c))
	eventually(t, 30*time.Second, "the discovered database listed", func() bool {
		_, body := get(t, base+"/")
		return strings.Contains(body, `href="/db/`+nameOf(c)+`/"`)
	})
	wantCode(t, ui.stop(t), ExitOK)
}
