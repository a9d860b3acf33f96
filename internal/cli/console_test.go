package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
	env["PGOUTBOX_UI_TOKEN"] = "s3cr3t-token-0123456789"
	b = start(t, invocation{env: env}, "ui", "--addr", "0.0.0.0:0", "--prefix", "/outbox")
	base = strings.Replace(b.metricsURL(t), "0.0.0.0", "127.0.0.1", 1)
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"s3cr3t-token-0123456789", http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, base+"/outbox/dead", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("token %q: %d, want %d: %s", tc.token, resp.StatusCode, tc.want, rb)
		}
	}
	r = b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "token from PGOUTBOX_UI_TOKEN")
	if strings.Contains(r.stdout+r.stderr, "s3cr3t-token-0123456789") {
		t.Errorf("the token was printed:\n%s", r)
	}
}

// DNS rebinding: a page of another site whose name resolves to 127.0.0.1
// reaches the console's port, with its own name in Host. Every request
// naming a host the console does not serve gets 421 before any page, cookie
// or action — even with a valid CSRF cookie and token, a matching Origin
// and Sec-Fetch-Site: same-origin.
func TestUI_RefusesRequestsForOtherHostNames(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	var id int64
	if err := d.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, last_error)
		VALUES ('user', 'u-1', 'PasswordReset', '{"reset_token": "s3cr3t-t0ken"}', 'dead', 'boom') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	b := start(t, invocation{env: d.env()}, "ui", "--addr", "127.0.0.1:0", "--public-host", "outbox.example.com")
	base := b.metricsURL(t)
	port := base[strings.LastIndex(base, ":")+1:]
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(host, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	// The console's own names work (and hand out the CSRF cookie and token).
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "outbox.example.com", "OUTBOX.example.com:" + port} {
		if resp, body := get(host, "/messages/"+strconv.FormatInt(id, 10)); resp.StatusCode != http.StatusOK || !strings.Contains(body, "s3cr3t-t0ken") {
			t.Fatalf("Host %s: GET the message = %d, want 200 with its payload", host, resp.StatusCode)
		}
	}
	_, deadPage := get("127.0.0.1:"+port, "/dead")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(deadPage)
	if m == nil {
		t.Fatalf("no CSRF token on /dead:\n%s", deadPage)
	}
	token := m[1]

	const evil = "rebind.attacker.example"
	resp, body := get(evil+":"+port, "/messages/"+strconv.FormatInt(id, 10))
	if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "s3cr3t") {
		t.Errorf("Host %s: GET the message = %d, want 421 without the payload:\n%s", evil, resp.StatusCode, body)
	}
	resp, body = get(evil+":"+port, "/dead")
	if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "csrf") || len(resp.Cookies()) > 0 {
		t.Errorf("Host %s: GET /dead = %d with cookies %v, want 421 and no CSRF token or cookie", evil, resp.StatusCode, resp.Cookies())
	}
	form := url.Values{"csrf": {token}, "action": {"skip"}, "scope": {"selected"}, "id": {strconv.FormatInt(id, 10)}, "reason": {"pwned"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/apply", strings.NewReader(form.Encode()))
	req.Host = evil + ":" + port
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+evil+":"+port)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for _, c := range jar.Cookies(mustParseURL(t, base)) {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host %s: POST /apply = %d, want 421", evil, resp.StatusCode)
	}
	var status, lastError string
	if err := d.pool.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM outbox WHERE id = $1`, id).Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "dead" || strings.Contains(lastError, "pwned") {
		t.Errorf("after the rebinding POST the message is %s (%q), want dead and untouched", status, lastError)
	}
	wantCode(t, b.stop(t), ExitOK)
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestUI_OffLoopbackRefusesShortSecretsAndBadTLSFlags(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"PGOUTBOX_UI_TOKEN": "short"}, []string{"--addr", "0.0.0.0:0"},
			"refusing to listen on 0.0.0.0:0 with a 5-character PGOUTBOX_UI_TOKEN: off loopback it must be at least 16 characters"},
		{map[string]string{"PGOUTBOX_UI_USER": "ops", "PGOUTBOX_UI_PASSWORD": "hunter2"}, []string{"--addr", "0.0.0.0:0"},
			"with a 7-character PGOUTBOX_UI_PASSWORD"},
		{map[string]string{}, []string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key must be given together"},
		{map[string]string{}, []string{"--public-host", "https://outbox.example.com"}, `--public-host "https://outbox.example.com": expected a host name`},
	} {
		tc.env["DATABASE_URL"] = d.url
		r := call(t, invocation{env: tc.env}, append([]string{"ui"}, tc.args...)...)
		wantCode(t, r, ExitUsage)
		mustContain(t, r, "stderr", tc.want)
	}
	r := call(t, invocation{env: d.env()}, "ui", "--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "ui: --tls-cert /nonexistent/cert.pem / --tls-key /nonexistent/key.pem:")
}

func TestUI_ServesHTTPSWithTLSFlags(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	dir := t.TempDir()
	certPEM, keyPEM, pool := selfSignedCert(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	env := d.env()
	env["PGOUTBOX_UI_TOKEN"] = "0123456789abcdef0123"
	b := start(t, invocation{env: env}, "ui", "--addr", "0.0.0.0:0", "--tls-cert", certFile, "--tls-key", keyFile)
	addr := strings.TrimPrefix(b.metricsURL(t), "http://")
	port := addr[strings.LastIndex(addr, ":")+1:]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+port+"/dead", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET https://…/dead = %d, want 200", resp.StatusCode)
	}
	if resp, err := http.Get("http://127.0.0.1:" + port + "/dead"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP was served on the HTTPS port")
		}
	}
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "pgoutbox ui: console on https://")
}

// selfSignedCert returns a certificate for 127.0.0.1 and localhost, its key
// (PEM) and a pool that trusts it.
func selfSignedCert(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgoutbox test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pool
}
