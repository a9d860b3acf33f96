package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestUI_RefusesNonLoopbackWithoutAuthentication(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.10:8080", "[::]:0", "example.com:80"} {
		r := call(t, invocation{env: d.env()}, "ui", "--addr", addr)
		wantCode(t, r, ExitUsage)
		mustContain(t, r, "stderr", "refusing to listen on "+addr+" without authentication: set PGOUTBOX_UI_TOKEN")
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PGOUTBOX_UI_USER": "ops"}, "PGOUTBOX_UI_USER and PGOUTBOX_UI_PASSWORD must be set together"},
		{map[string]string{"PGOUTBOX_UI_TOKEN": "t", "PGOUTBOX_UI_PASSWORD": "p"}, "not both"},
	} {
		tc.env["DATABASE_URL"] = d.url
		r := call(t, invocation{env: tc.env}, "ui", "--addr", "0.0.0.0:0")
		wantCode(t, r, ExitUsage)
		mustContain(t, r, "stderr", tc.want)
	}
	r := call(t, invocation{env: d.env()}, "ui", "--prefix", "outbox/")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", "--prefix must start with /")
}

func TestUI_ServesOnLoopbackAndWithTokenElsewhere(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.enqueue(t, 3, "OrderPaid", "o-1", false)

	b := start(t, invocation{env: d.env()}, "ui", "--addr", "127.0.0.1:0", "--read-only")
	base := b.metricsURL(t)
	resp, err := http.Get(base + "/messages")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "OrderPaid") || !strings.Contains(string(body), "read-only") {
		t.Errorf("GET /messages: %d\n%s", resp.StatusCode, body)
	}
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "pgoutbox ui: console on http://127.0.0.1:")
	mustContain(t, r, "stdout", "read-only; no authentication (loopback only)")

	env := d.env()
	env["PGOUTBOX_UI_TOKEN"] = "s3cr3t-token"
	b = start(t, invocation{env: env}, "ui", "--addr", "0.0.0.0:0", "--prefix", "/outbox")
	base = strings.Replace(b.metricsURL(t), "0.0.0.0", "127.0.0.1", 1)
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"s3cr3t-token", http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, base+"/outbox/dead", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
	r = b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "token from PGOUTBOX_UI_TOKEN")
	if strings.Contains(r.stdout+r.stderr, "s3cr3t-token") {
		t.Errorf("the token was printed:\n%s", r)
	}
}
