package cli

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The probes of deploy/kubernetes: /readyz follows /healthz (503 while the
// publisher is unreachable, 200 once it answers); /livez answers 200 all
// along, since restarting the relay would not bring the receiver back.
func TestRun_ProbesReadyzFollowsHealthAndLivezStaysUp(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	port := closedPort(t)
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "http", "--http-url", fmt.Sprintf("http://127.0.0.1:%d/hook", port),
		"--poll-interval", "50ms", "--metrics-addr", "127.0.0.1:0", "--health-interval", "50ms")
	base := b.metricsURL(t)
	eventually(t, 30*time.Second, "the startup warning", func() bool {
		return strings.Contains(b.stderr.String(), "publisher is not reachable; starting anyway")
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, base+path); code != http.StatusServiceUnavailable || !strings.Contains(body, "publisher: webhook: ping") {
			t.Errorf("%s = %d %q, want 503 naming the publisher", path, code, body)
		}
	}
	if code, body := get(t, base+"/livez"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez = %d %q while the receiver is down, want 200 ok", code, body)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("listen on the receiver port: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	eventually(t, 30*time.Second, "/readyz ok", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
	if code, _ := get(t, base+"/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d, want 200", code)
	}
	wantCode(t, b.stop(t), ExitOK)
}
