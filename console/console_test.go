package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// client is a browser-like HTTP client: a cookie jar, and the CSRF token of
// the last page it loaded.
type client struct {
	*http.Client
	base  string
	token string
}

func newClient(t *testing.T, base string) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{Client: &http.Client{Jar: jar}, base: base}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := c.Get(c.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if m := csrfRe.FindStringSubmatch(string(b)); m != nil {
		c.token = m[1]
	}
	return resp.StatusCode, string(b)
}

func (c *client) post(t *testing.T, path string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func skipForm(id int64, token string) url.Values {
	v := url.Values{"action": {"skip"}, "scope": {"selected"}, "id": {strconv.FormatInt(id, 10)}, "reason": {"test"}}
	if token != "" {
		v.Set("csrf", token)
	}
	return v
}

func TestConsole_StateChangeWithoutCSRFTokenChangesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	id := f.shipped[0]

	fresh := newClient(t, s.URL) // never loaded a page: no cookie
	loaded := newClient(t, s.URL)
	loaded.get(t, "/dead") // cookie and token
	other := newClient(t, s.URL)
	other.get(t, "/dead") // a token for another browser's cookie
	cases := []struct {
		name   string
		c      *client
		token  string
		header []string
	}{
		{"no cookie, no token", fresh, "", nil},
		{"cookie, no token", loaded, "", nil},
		{"cookie, wrong token", loaded, "AAAA" + loaded.token[4:], nil},
		{"cookie, another browser's token", loaded, other.token, nil},
		{"no cookie, a valid token", fresh, loaded.token, nil},
		{"valid token from another origin", loaded, loaded.token, []string{"Sec-Fetch-Site", "cross-site"}},
		{"valid token, Origin of another site", loaded, loaded.token, []string{"Origin", "http://evil.example"}},
	}
	for _, tc := range cases {
		for _, path := range []string{"/confirm", "/apply"} {
			code, body := tc.c.post(t, path, skipForm(id, tc.token), tc.header...)
			if code != http.StatusForbidden {
				t.Errorf("%s: POST %s: %d, want 403\n%s", tc.name, path, code, body)
			}
		}
		if st, _ := f.status(t, id); st != "dead" {
			t.Fatalf("%s: message %d is %s, want dead (unchanged)", tc.name, id, st)
		}
	}
	// GET never changes anything either.
	if code, _ := loaded.get(t, "/apply?"+skipForm(id, loaded.token).Encode()); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /apply: %d, want 405", code)
	}
	// The same request with the token goes through.
	if code, body := loaded.post(t, "/apply", skipForm(id, loaded.token)); code != http.StatusOK || !strings.Contains(body, `id="changed">1<`) {
		t.Fatalf("POST /apply with the token: %d\n%s", code, body)
	}
	if st, le := f.status(t, id); st != "skipped" || !strings.HasPrefix(le, "skipped: test | ") {
		t.Errorf("message %d after a valid skip: %s %q", id, st, le)
	}
}

func TestConsole_ReadOnlyHidesActionsAndRejectsThem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{ReadOnly: true})
	c := newClient(t, s.URL)
	for _, path := range []string{"/", "/messages", "/messages/" + strconv.FormatInt(f.shipped[0], 10), "/dead", "/blocked"} {
		code, body := c.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		for _, bad := range []string{`method="post"`, `name="csrf"`, "Retry", "Skip", "skip head"} {
			if strings.Contains(body, bad) {
				t.Errorf("read-only %s shows %q", path, bad)
			}
		}
		mustContain(t, path, body, "read-only")
	}
	// A token from a writable console of the same database does not help.
	w := f.serve(t, console.Config{})
	wc := newClient(t, w.URL)
	wc.get(t, "/dead")
	c.token = wc.token
	for _, path := range []string{"/confirm", "/apply"} {
		if code, body := c.post(t, path, skipForm(f.shipped[0], c.token)); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("read-only POST %s: %d\n%s", path, code, body)
		}
	}
	if st, _ := f.status(t, f.shipped[0]); st != "dead" {
		t.Errorf("read-only console changed message %d to %s", f.shipped[0], st)
	}
	mustContain(t, "log", s.log.String(), "action refused: read-only")
}

func TestConsole_Authentication(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := f.serve(t, console.Config{Token: "t0ken-abc"})
	basic := f.serve(t, console.Config{BasicUser: "ops", BasicPassword: "pa55word"})
	cases := []struct {
		name string
		s    *server
		set  func(*http.Request)
		want int
	}{
		{"token: none", tok, func(*http.Request) {}, 401},
		{"token: bearer", tok, func(r *http.Request) { r.Header.Set("Authorization", "Bearer t0ken-abc") }, 200},
		{"token: wrong bearer", tok, func(r *http.Request) { r.Header.Set("Authorization", "Bearer t0ken-abd") }, 401},
		{"token: as basic password", tok, func(r *http.Request) { r.SetBasicAuth("anyone", "t0ken-abc") }, 200},
		{"token: wrong basic password", tok, func(r *http.Request) { r.SetBasicAuth("anyone", "nope") }, 401},
		{"basic: none", basic, func(*http.Request) {}, 401},
		{"basic: right", basic, func(r *http.Request) { r.SetBasicAuth("ops", "pa55word") }, 200},
		{"basic: wrong user", basic, func(r *http.Request) { r.SetBasicAuth("root", "pa55word") }, 401},
		{"basic: wrong password", basic, func(r *http.Request) { r.SetBasicAuth("ops", "pa55wore") }, 401},
	}
	for _, tc := range cases {
		for _, path := range []string{"/", "/dead", "/static/style.css"} {
			req, _ := http.NewRequest(http.MethodGet, tc.s.URL+path, nil)
			tc.set(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s: GET %s: %d, want %d", tc.name, path, resp.StatusCode, tc.want)
			}
			if tc.want == 401 && (resp.Header.Get("WWW-Authenticate") == "" || strings.Contains(string(b), "pgoutbox ·")) {
				t.Errorf("%s: 401 without a challenge, or with the page", tc.name)
			}
		}
	}
	for _, s := range []*server{tok, basic} {
		if strings.Contains(s.log.String(), "t0ken-abc") || strings.Contains(s.log.String(), "pa55word") {
			t.Errorf("a credential is in the log:\n%s", s.log.String())
		}
	}
}

// Every response carries the security headers; pages are self-contained
// (no script, no external URL).
func TestConsole_SecurityHeadersAndSelfContainedPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	c := newClient(t, s.URL)
	external := regexp.MustCompile(`(?i)(src|href|action)="(https?:)?//`)
	for _, path := range []string{"/", "/messages", "/messages/" + strconv.FormatInt(f.xssID, 10), "/dead", "/blocked", "/static/style.css", "/nope"} {
		resp, err := c.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "script-src") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no X-Content-Type-Options: nosniff", path)
		}
		if strings.Contains(strings.ToLower(string(b)), "<script") {
			t.Errorf("%s: the page contains a script element", path)
		}
		if m := external.FindString(string(b)); m != "" {
			t.Errorf("%s: external reference %q", path, m)
		}
	}
}

// Under docs/roles.sql: read-only with a pgoutbox_relay login, actions with
// a pgoutbox_admin login; the DSN's password appears on no page and in no
// log line.
func TestConsole_WorksUnderLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	roles, err := os.ReadFile("../docs/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, string(roles)); err != nil {
		t.Fatalf("docs/roles.sql: %v", err)
	}
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	const password = "Sup3r-secret-pw"
	login := func(name, group string) string {
		t.Helper()
		if _, err := f.pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE %s`, name, password, group)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = f.pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+name)
		})
		u, err := url.Parse(f.url)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(name, password)
		return u.String()
	}
	relayURL := login("console_ro_"+suffix, "pgoutbox_relay")
	adminURL := login("console_ops_"+suffix, "pgoutbox_admin")

	ro := serveOn(t, pgtest.Pool(t, relayURL), console.Config{ReadOnly: true})
	c := newClient(t, ro.URL)
	paths := []string{"/", "/messages", "/messages?status=dead&event_type=OrderShipped", "/messages?from=2020-01-01T00:00",
		"/messages/" + strconv.FormatInt(f.shipped[0], 10), "/dead", "/dead?aggregate_type=invoice", "/blocked"}
	for _, path := range paths {
		code, body := c.get(t, path)
		if code != http.StatusOK {
			t.Errorf("read-only as pgoutbox_relay: GET %s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, password) {
			t.Errorf("GET %s shows the database password", path)
		}
		mustContain(t, path, body, "console_ro_"+suffix+"@")
	}

	ops := serveOn(t, pgtest.Pool(t, adminURL), console.Config{})
	oc := newClient(t, ops.URL)
	oc.get(t, "/dead")
	form := url.Values{"csrf": {oc.token}, "action": {"retry"}, "scope": {"selected"}, "id": {strconv.FormatInt(f.invoices[0], 10)}}
	if code, body := oc.post(t, "/apply", form); code != http.StatusOK || !strings.Contains(body, `id="changed">1<`) {
		t.Fatalf("retry as pgoutbox_admin: %d\n%s", code, body)
	}
	if st, _ := f.status(t, f.invoices[0]); st != "pending" {
		t.Errorf("message %d after retry as pgoutbox_admin: %s", f.invoices[0], st)
	}
	for _, s := range []*server{ro, ops} {
		if strings.Contains(s.log.String(), password) {
			t.Errorf("the database password is in the log:\n%s", s.log.String())
		}
	}
}

// Mounted under a prefix of an application's mux: links, forms and assets
// carry the prefix.
func TestConsole_MountedUnderPrefix(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h, err := console.New(f.pool, console.Config{Prefix: "/ops/outbox"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/outbox/", h)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "the application") })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	code, body := c.get(t, "/ops/outbox/")
	if code != http.StatusOK {
		t.Fatalf("GET /ops/outbox/: %d\n%s", code, body)
	}
	mustContain(t, "overview", body, `href="/ops/outbox/static/style.css"`, `href="/ops/outbox/dead"`)
	if code, body := c.get(t, "/ops/outbox/static/style.css"); code != http.StatusOK || !strings.Contains(body, "font") {
		t.Errorf("stylesheet under the prefix: %d", code)
	}
	code, body = c.get(t, "/ops/outbox/dead")
	mustContain(t, "dead", body, `action="/ops/outbox/confirm"`)
	form := url.Values{"csrf": {c.token}, "action": {"retry"}, "scope": {"selected"}, "id": {strconv.FormatInt(f.shipped[3], 10)}}
	if code, body := c.post(t, "/ops/outbox/apply", form); code != http.StatusOK || !strings.Contains(body, `href="/ops/outbox/dead"`) {
		t.Errorf("apply under the prefix: %d\n%s", code, body)
	}
	if _, body := c.get(t, "/"); body != "the application" {
		t.Errorf("the console answered outside its prefix: %q", body)
	}
}

var rowIDRe = regexp.MustCompile(`<td class="n"><a href="/messages/(\d+)">`)

func pageIDs(body string) []int64 {
	var ids []int64
	for _, m := range rowIDRe.FindAllStringSubmatch(body, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		ids = append(ids, id)
	}
	return ids
}

var nextRe = regexp.MustCompile(`href="([^"]+)" id="next"`)

// walk follows the "older" links from path and returns every id listed.
func walk(t *testing.T, c *client, path string) (ids []int64, pages int) {
	t.Helper()
	for pages = 1; pages < 1000; pages++ {
		code, body := c.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		ids = append(ids, pageIDs(body)...)
		m := nextRe.FindStringSubmatch(body)
		if m == nil {
			return ids, pages
		}
		path = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	t.Fatal("more than 1000 pages")
	return nil, 0
}

// Keyset pages (5 rows, at most 10 index entries read per page) list every
// matching message exactly once, newest first, with selective filters too.
func TestConsole_KeysetPagesListEveryMatchOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{PageRows: 5, ScanRows: 10})
	c := newClient(t, s.URL)
	cases := []struct {
		path, where string
	}{
		{"/messages?status=processing", "status = 'processing'"},
		{"/messages?event_type=ItemAdded", "event_type = 'ItemAdded'"},
		{"/messages?status=dead", "status = 'dead'"},
		{"/messages?aggregate_type=invoice&status=dead", "aggregate_type = 'invoice' AND status = 'dead'"},
		{"/dead", "status = 'dead'"},
		{"/dead?event_type=OrderShipped", "status = 'dead' AND event_type = 'OrderShipped'"},
		{"/messages?aggregate_id=o-2999", "aggregate_id = 'o-2999'"},
	}
	for _, tc := range cases {
		got, pages := walk(t, c, tc.path)
		var want []int64
		rows, err := f.pool.Query(t.Context(), `SELECT id FROM outbox WHERE `+tc.where+` ORDER BY id DESC`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			_ = rows.Scan(&id)
			want = append(want, id)
		}
		rows.Close()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: listed (%d pages)\n%v\nwant\n%v", tc.path, pages, got, want)
		}
	}
}

// A time range lists the messages created in it, found through the id
// range its binary search gives.
func TestConsole_TimeRangeFilter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	// Three old messages, one per day, after the fixture's (ids grow, as
	// they do in production, with created_at).
	var ids []int64
	for _, ago := range []string{"3 days", "2 days", "1 day"} {
		var id int64
		if err := f.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at, status, done_at)
			VALUES ('order', 'old', 'Old', '{}', now() - $1::interval, 'done', now()) RETURNING id`, ago).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Rewrite the fixture's rows as older still, so created_at grows with id.
	if _, err := f.pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '10 days' WHERE id < $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	s := f.serve(t, console.Config{PageRows: 5, ScanRows: 10})
	c := newClient(t, s.URL)
	day := func(d int) string {
		return time.Now().UTC().Add(time.Duration(-d) * 24 * time.Hour).Format("2006-01-02T15:04")
	}
	got, _ := walk(t, c, "/messages?from="+day(4)+"&to="+day(1))
	if fmt.Sprint(got) != fmt.Sprint([]int64{ids[1], ids[0]}) {
		t.Errorf("from 4 days ago to 1 day ago: %v, want %v", got, []int64{ids[1], ids[0]})
	}
	if code, body := c.get(t, "/messages?from=yesterday"); code != http.StatusBadRequest || !strings.Contains(body, "expected a UTC time") {
		t.Errorf("bad time: %d\n%s", code, body)
	}
}

// The blocked page's actions: retry of a pending head in backoff makes it
// available now; skip of a dead head needs a reason and unblocks it.
func TestConsole_BlockedHeadRetryAndSkip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	c := newClient(t, s.URL)
	c.get(t, "/blocked")
	retry := url.Values{"csrf": {c.token}, "action": {"retry"}, "scope": {"selected"}, "id": {strconv.FormatInt(f.slowHead, 10)}, "back": {"/blocked"}}
	if code, body := c.post(t, "/apply", retry); code != http.StatusOK || !strings.Contains(body, "pending in backoff and is available now") {
		t.Fatalf("retry pending head: %d\n%s", code, body)
	}
	var inBackoff bool
	if err := f.pool.QueryRow(t.Context(), `SELECT available_at > now() FROM outbox WHERE id = $1`, f.slowHead).Scan(&inBackoff); err != nil || inBackoff {
		t.Errorf("head %d still in backoff after retry (%v)", f.slowHead, err)
	}
	skip := url.Values{"csrf": {c.token}, "action": {"skip"}, "scope": {"selected"}, "id": {strconv.FormatInt(f.deadHead, 10)}}
	if code, body := c.post(t, "/apply", skip); code != http.StatusBadRequest || !strings.Contains(body, "needs a reason") {
		t.Errorf("skip without a reason: %d\n%s", code, body)
	}
	if st, _ := f.status(t, f.deadHead); st != "dead" {
		t.Fatalf("skip without a reason changed head %d to %s", f.deadHead, st)
	}
	skip.Set("reason", "replayed by hand")
	if code, body := c.post(t, "/apply", skip); code != http.StatusOK {
		t.Fatalf("skip: %d\n%s", code, body)
	}
	if st, _ := f.status(t, f.deadHead); st != "skipped" {
		t.Errorf("head %d after skip: %s", f.deadHead, st)
	}
	_, body := c.get(t, "/blocked")
	if strings.Contains(body, fmt.Sprintf(`/messages/%d"`, f.deadHead)) {
		t.Errorf("skipped head %d still listed as blocking", f.deadHead)
	}
}

// The blocked page and the overview's count start from the heads: a
// fresh live head is not blocked, a head leased for longer than
// StalledAfter is, and every aggregate shows its whole backlog and its
// oldest undelivered message.
func TestConsole_BlockedFromHeads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := f.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	// c-fresh: three pending rows, the head created now: not blocked.
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
	      SELECT 'cart', 'c-fresh', 'ItemAdded', '{}', true FROM generate_series(1, 3)`)
	// c-leased: created 20 minutes ago, its head leased by a relay since.
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered, created_at)
	      SELECT 'cart', 'c-leased', 'ItemRemoved', '{}', true, now() - interval '20 minutes' FROM generate_series(1, 2)`)
	exec(`SELECT outbox_resolve_heads(1000)`) // as the relay does before its ordered claims
	var leased int64
	if err := f.pool.QueryRow(ctx, `UPDATE outbox SET status = 'processing', lease_owner = 'relay-z', lease_until = now() + interval '1 hour',
	      lease_version = 1, attempts = 1 WHERE aggregate_id = 'c-leased' AND head RETURNING id`).Scan(&leased); err != nil {
		t.Fatalf("lease the head of c-leased: %v", err)
	}
	s := f.serve(t, console.Config{})
	c := newClient(t, s.URL)
	_, body := c.get(t, "/blocked")
	rows := map[string]string{}
	for _, tr := range strings.Split(between(body, "<tbody>", "</tbody>"), "<tr>")[1:] {
		rows[between(tr, "<td>", "</td>")] = tr
	}
	if _, ok := rows["c-fresh"]; ok {
		t.Errorf("c-fresh (a head created now) listed as blocked")
	}
	for agg, want := range map[string][]string{
		"c-1":      {fmt.Sprintf(`/messages/%d"`, f.deadHead), `<span class="st dead">`, `<td class="n">4</td>`, "10m"},
		"c-2":      {fmt.Sprintf(`/messages/%d"`, f.slowHead), `<span class="st pending">`, `<td class="n">4</td>`, "10m"},
		"c-leased": {fmt.Sprintf(`/messages/%d"`, leased), `<span class="st processing">`, `<td class="n">2</td>`, "20m"},
	} {
		tr, ok := rows[agg]
		if !ok {
			t.Errorf("%s not listed as blocked:\n%s", agg, body)
			continue
		}
		mustContain(t, agg+"'s row", tr, want...)
	}
	_, body = c.get(t, "/")
	mustContain(t, "overview", body, `id="blocked"><a href="/blocked">3</a>`)
}

// The overview's oldest undelivered message comes from each kind of
// undelivered row: ordered pending (the fixture's carts, 10 minutes old),
// then processing, then unordered pending; dead rows never count.
func TestConsole_OverviewOldestUndelivered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	c := newClient(t, s.URL)
	oldest := func() string {
		t.Helper()
		_, body := c.get(t, "/")
		return between(body, `id="oldest">`, "<")
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := f.pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, attempts, created_at)
	      VALUES ('order', 'o-old-dead', 'OrderPaid', '{}', 'dead', 8, now() - interval '3 hours')`)
	if got := oldest(); !strings.HasPrefix(got, "10m") {
		t.Errorf("oldest undelivered = %q, want 10m.. (the pending ordered carts; dead rows do not count)", got)
	}
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, lease_owner, lease_until, lease_version, attempts, created_at)
	      VALUES ('order', 'o-old-l', 'OrderPaid', '{}', 'processing', 'relay-a', now() + interval '1 hour', 1, 1, now() - interval '30 minutes')`)
	if got := oldest(); !strings.HasPrefix(got, "30m") {
		t.Errorf("oldest undelivered = %q, want 30m.. (a processing row)", got)
	}
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
	      VALUES ('order', 'o-old-p', 'OrderPaid', '{}', now() - interval '40 minutes')`)
	if got := oldest(); !strings.HasPrefix(got, "40m") {
		t.Errorf("oldest undelivered = %q, want 40m.. (an unordered pending row)", got)
	}
}

// With nothing pending or processing, the overview's oldest undelivered
// message is "none", not an age of 0ms.
func TestConsole_OverviewOldestUndeliveredIsNoneWhenNothingWaits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.pool.Exec(t.Context(), `DELETE FROM outbox WHERE status IN ('pending', 'processing')`); err != nil {
		t.Fatal(err)
	}
	s := f.serve(t, console.Config{})
	_, body := newClient(t, s.URL).get(t, "/")
	if got := between(body, `id="oldest">`, "<"); got != "none" {
		t.Errorf("oldest undelivered = %q with nothing pending or processing, want none", got)
	}
}

func TestConsole_NewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, cfg := range []console.Config{
		{Prefix: "outbox"}, {Prefix: "/outbox/"}, {BasicUser: "u"}, {Token: "t", BasicUser: "u", BasicPassword: "p"},
		{PageRows: -1}, {Table: "bad name"}, {Refresh: time.Millisecond},
		{Hosts: []string{""}}, {Hosts: []string{"https://outbox.example.com"}},
	} {
		if _, err := console.New(pool, cfg); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("New(%+v): %v, want an invalid config error", cfg, err)
		}
	}
}

// Host names: IP addresses and localhost always, Config.Hosts besides, "*"
// anything; every other name gets 421 before any page (DNS rebinding).
func TestConsole_AnswersOnlyItsOwnHostNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		hosts []string
		host  string
		want  int
	}{
		{nil, "127.0.0.1:8080", http.StatusOK},
		{nil, "[::1]:8080", http.StatusOK},
		{nil, "10.0.0.5", http.StatusOK},
		{nil, "localhost:8080", http.StatusOK},
		{nil, "app.localhost", http.StatusOK},
		{nil, "rebind.attacker.example", http.StatusMisdirectedRequest},
		{nil, "localhost.attacker.example", http.StatusMisdirectedRequest},
		{nil, "127.0.0.1.nip.io", http.StatusMisdirectedRequest},
		{[]string{"outbox.example.com"}, "outbox.example.com:443", http.StatusOK},
		{[]string{"outbox.example.com"}, "Outbox.Example.Com.", http.StatusOK},
		{[]string{"outbox.example.com"}, "evil.example.com", http.StatusMisdirectedRequest},
		{[]string{"*"}, "anything.example", http.StatusOK},
	} {
		h, err := console.New(pool, console.Config{Hosts: tc.hosts})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/dead", nil)
		req.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("Hosts %q, Host %q: %d, want %d", tc.hosts, tc.host, w.Code, tc.want)
		}
		if tc.want == http.StatusMisdirectedRequest && (len(w.Result().Cookies()) > 0 || strings.Contains(w.Body.String(), "csrf")) {
			t.Errorf("Host %q: a refused request got a CSRF cookie or token", tc.host)
		}
	}
}
