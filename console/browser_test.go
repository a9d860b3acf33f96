package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgoutbox/pgoutbox/console"
)

// Browser tests drive Debian's chromium (CHROMIUM overrides the path)
// through the DevTools protocol with chromedp. chromedp is a test-only
// requirement of this package: an application importing console (or
// dispatcher) inherits none of it (internal/importtest checks).
//
// PGOUTBOX_CONSOLE_SCREENSHOTS=1 writes a screenshot of each page to
// docs/console/ (the README shows them): from a real relay run
// (realrun_test.go), and the XSS page from the fixture.

func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: the browser tests need it (Debian/Ubuntu: apt-get install chromium; or set CHROMIUM to its path)")
	return ""
}

// browser starts a headless chromium with a fresh profile and returns a
// context for one tab, closed when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now (the first Do owns the browser's lifetime, so no
	// deadline here), so that a missing or broken chromium fails here with
	// its error.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs browser steps with a deadline.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs one browser action that returns a value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// text is the visible text of the first element matching the CSS selector.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

func eval(t *testing.T, ctx context.Context, js string) int {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[int](js))
}

func navigate(t *testing.T, ctx context.Context, url, wait string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(wait)))
}

func click(t *testing.T, ctx context.Context, sel, wait string) {
	t.Helper()
	do(t, ctx, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS(wait)))
}

// screenshot saves the page to docs/console/NAME.png when asked to.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("PGOUTBOX_CONSOLE_SCREENSHOTS") == "" {
		return
	}
	png := get(t, ctx, chromedp.FullScreenshot(100))
	dir := filepath.Join("..", "docs", "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBrowser_EveryPageLoads(t *testing.T) {
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	ctx := browser(t)
	pages := []struct {
		name, path, title string
		wait              string   // an element the page must show
		want              []string // text the main element must contain
	}{
		{"overview", "/", "Overview", "#count-dead", []string{"pending", "Relays", "Throughput", "latency"}},
		{"messages", "/messages", "Messages", "#messages", []string{"OrderPaid", "OrderShipped", "ItemAdded"}},
		{"messages-filtered", "/messages?status=dead&event_type=InvoiceSent", "Messages", "#messages", []string{"InvoiceSent", "nats: no responders"}},
		{"message", "/messages/" + strconv.FormatInt(f.shipped[0], 10), "Message " + strconv.FormatInt(f.shipped[0], 10), "#payload", []string{"order_id", "HTTP 422"}},
		{"dead", "/dead", "Dead letters", "#dead", []string{"OrderShipped", "InvoiceSent", "Retry all matching this filter"}},
		{"blocked", "/blocked", "Blocked aggregates", "#blocked", []string{"c-1", "c-2", "webhook: HTTP 400 Bad Request", "retry head", "skip head"}},
	}
	for _, p := range pages {
		navigate(t, ctx, s.URL+p.path, p.wait)
		if h1 := text(t, ctx, "h1"); h1 != p.title {
			t.Errorf("%s: h1 %q, want %q", p.path, h1, p.title)
		}
		main := text(t, ctx, "main")
		for _, w := range p.want {
			if !strings.Contains(main, w) {
				t.Errorf("%s: page does not show %q:\n%s", p.path, w, main)
			}
		}
	}
	// The overview's figures are the fixture's: pending 20 unordered + 7
	// ordered (cart; one head is dead), 4 processing (one lease expired),
	// 19 dead, 2 blocked aggregates.
	navigate(t, ctx, s.URL+"/", "#count-dead")
	var got []string
	for _, sel := range []string{"#count-pending", "#count-processing", "#count-dead", "#expired", "#blocked"} {
		got = append(got, text(t, ctx, sel))
	}
	if strings.Join(got, " ") != "27 4 19 1 2" {
		t.Errorf("overview pending, processing, dead, expired leases, blocked = %q, want 27 4 19 1 2", got)
	}
	if bars := eval(t, ctx, `document.querySelectorAll('svg.chart rect').length`); bars < 30 {
		t.Errorf("throughput chart has %d bars, want one per minute with deliveries (about 59)", bars)
	}
}

func TestBrowser_BulkRetrySelectedThroughConfirmation(t *testing.T) {
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	ctx := browser(t)
	a, b := f.shipped[0], f.shipped[1]
	navigate(t, ctx, s.URL+"/dead", "#dead")
	do(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf("#sel-%d", a))), chromedp.Click(chromedp.CSS(fmt.Sprintf("#sel-%d", b))))
	click(t, ctx, "#retry-selected", "#confirm")
	mustContain(t, "confirmation", text(t, ctx, "#summary"), "Retry 2 selected messages")
	// Nothing changed before the confirmation.
	if st, _ := f.status(t, a); st != "dead" {
		t.Fatalf("message %d is %s before the confirmation, want dead", a, st)
	}
	click(t, ctx, "#confirm", "#result")
	mustContain(t, "result", text(t, ctx, "#result"), "Retried 2 messages of 2 selected")
	for _, id := range []int64{a, b} {
		var st string
		var attempts int
		if err := f.pool.QueryRow(t.Context(), `SELECT status, attempts FROM outbox WHERE id = $1`, id).Scan(&st, &attempts); err != nil {
			t.Fatal(err)
		}
		if st != "pending" || attempts != 0 {
			t.Errorf("message %d after retry: %s, attempts %d; want pending, 0", id, st, attempts)
		}
	}
	if n := f.deadCount(t); n != 19-2 {
		t.Errorf("%d dead after retrying 2 of 19, want 17", n)
	}
	mustContain(t, "action log", s.log.String(), "console: action", "action=retry", "changed=2", fmt.Sprintf("changed_ids=\"[%d %d]\"", a, b))
}

func TestBrowser_BulkSkipAllMatchingFilterThroughConfirmation(t *testing.T) {
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	ctx := browser(t)
	navigate(t, ctx, s.URL+"/dead?event_type=OrderShipped", "#dead")
	click(t, ctx, "#skip-filter", "#confirm")
	// The count is shown before acting, and it is the database's.
	if count := text(t, ctx, "#count"); count != "12" {
		t.Errorf("confirmation count %q, want 12 (dead OrderShipped)", count)
	}
	mustContain(t, "confirmation", text(t, ctx, "#summary"), `event type = "OrderShipped"`)
	// A message that dies after the confirmation page is not touched.
	var late int64
	if err := f.pool.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status)
		VALUES ('order', 'late', 'OrderShipped', '{}', 'dead') RETURNING id`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#reason"), "customer deleted upstream"))
	click(t, ctx, "#confirm", "#result")
	mustContain(t, "result", text(t, ctx, "#result"), "Skipped 12 messages (12 listed when confirmed)")
	for _, id := range f.shipped {
		st, le := f.status(t, id)
		if st != "skipped" || !strings.HasPrefix(le, "skipped: customer deleted upstream | webhook: HTTP 422") {
			t.Errorf("message %d after skip: %s %q; want skipped with the reason in last_error", id, st, le)
		}
	}
	for _, id := range append([]int64{late, f.xssID}, f.invoices...) {
		if st, _ := f.status(t, id); st != "dead" {
			t.Errorf("message %d (not in the confirmed set) is %s, want dead", id, st)
		}
	}
	mustContain(t, "action log", s.log.String(), "action=skip", "scope=filter", "changed=12", `reason="customer deleted upstream"`)
}

func TestBrowser_PayloadAndHeadersRenderAsText(t *testing.T) {
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	ctx := browser(t)
	navigate(t, ctx, s.URL+"/messages/"+strconv.FormatInt(f.xssID, 10), "#payload")
	mustContain(t, "payload", text(t, ctx, "#payload"), `<script>document.title='pwned'</script><img src=x onerror=alert(1)>`)
	mustContain(t, "headers", text(t, ctx, "#headers"), `<b id=\"evil\">bold</b>`)
	mustContain(t, "last error", text(t, ctx, "#last-error"), `<script>alert(2)</script>`)
	scripts := eval(t, ctx, `document.querySelectorAll('script').length`)
	injected := eval(t, ctx, `document.querySelectorAll('#payload *, #headers *, #evil, img').length`)
	title := get(t, ctx, chromedp.Title())
	if scripts != 0 || injected != 0 || strings.Contains(title, "pwned") {
		t.Errorf("payload was rendered as HTML: %d script elements, %d injected elements, title %q", scripts, injected, title)
	}
	screenshot(t, ctx, "message-xss")
	// The list pages escape it too (aggregate id "o-<i>x</i>", the error).
	for _, path := range []string{"/dead", "/messages?status=dead"} {
		navigate(t, ctx, s.URL+path, "table")
		if n := eval(t, ctx, `document.querySelectorAll('script, main i, img').length`); n != 0 {
			t.Errorf("%s: %d injected elements from the aggregate id or error", path, n)
		}
		mustContain(t, path, text(t, ctx, "main"), "o-<i>x</i>")
	}
}

// A form on another origin (another port of 127.0.0.1: same site, other
// origin) posting to the console without the token changes nothing; the
// browser sends the console's cookies along, so only the token and the
// origin check stop it.
func TestBrowser_CrossOriginFormWithoutCSRFTokenChangesNothing(t *testing.T) {
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	ctx := browser(t)
	id := f.shipped[0]
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/apply">
<input type="hidden" name="action" value="skip"><input type="hidden" name="scope" value="selected">
<input type="hidden" name="id" value="%d"><input type="hidden" name="reason" value="csrf">
<button id="go" type="submit">go</button></form>`, s.URL, id)
	}))
	t.Cleanup(evil.Close)
	navigate(t, ctx, s.URL+"/dead", "#dead") // the console's cookie is set
	navigate(t, ctx, evil.URL, "#go")
	click(t, ctx, "#go", "#error")
	mustContain(t, "refusal", text(t, ctx, "#error"), "nothing changed")
	if st, _ := f.status(t, id); st != "dead" {
		t.Errorf("message %d is %s after a cross-origin POST, want dead", id, st)
	}
	mustContain(t, "log", s.log.String(), "action refused")
}
