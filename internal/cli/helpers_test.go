package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a running
// relay and the reads of the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is one finished invocation.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// invocation configures one in-process run of the command.
type invocation struct {
	env      map[string]string
	stdin    string
	terminal *bool // stdin and stdout are terminals
	opts     func(*options)
}

// call runs pgoutbox args to completion.
func call(t *testing.T, inv invocation, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	o := inv.options(&stdout, &stderr)
	code := run(ctx, args, o)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func (inv invocation) options(stdout, stderr *syncBuffer) options {
	o := options{
		stdin:  strings.NewReader(inv.stdin),
		stdout: stdout,
		stderr: stderr,
		getenv: func(k string) string { return inv.env[k] },
	}
	if inv.terminal != nil {
		o.stdinTerminal, o.stdoutTerminal = inv.terminal, inv.terminal
	} else {
		no := false
		o.stdinTerminal, o.stdoutTerminal = &no, &no
	}
	if inv.opts != nil {
		inv.opts(&o)
	}
	return o
}

// background is a command running until stop is called.
type background struct {
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan int
	addr           chan net.Addr
}

func start(t *testing.T, inv invocation, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1), addr: make(chan net.Addr, 1)}
	o := inv.options(b.stdout, b.stderr)
	o.metricsListening = func(a net.Addr) { b.addr <- a }
	go func() { b.done <- run(ctx, args, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(30 * time.Second):
			t.Error("command did not stop within 30s of cancel")
		}
	})
	return b
}

// stop cancels the command (SIGINT) and returns its result.
func (b *background) stop(t *testing.T) result {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.done:
		b.done <- code // for the cleanup
		return result{code: code, stdout: b.stdout.String(), stderr: b.stderr.String()}
	case <-time.After(30 * time.Second):
		t.Fatalf("command did not stop within 30s\n--- stderr:\n%s", b.stderr.String())
	}
	return result{}
}

// exited reports whether the command ended by itself.
func (b *background) exited() (int, bool) {
	select {
	case code := <-b.done:
		b.done <- code
		return code, true
	default:
		return 0, false
	}
}

// metricsURL waits for the metrics server's address.
func (b *background) metricsURL(t *testing.T) string {
	t.Helper()
	select {
	case a := <-b.addr:
		return "http://" + a.String()
	case <-time.After(30 * time.Second):
		t.Fatalf("metrics server did not start\n--- stderr:\n%s", b.stderr.String())
	}
	return ""
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testDB is a fresh migrated database.
type testDB struct {
	url  string
	pool *pgxpool.Pool
}

func newDB(t *testing.T) *testDB {
	t.Helper()
	u := pgtest.NewURL(t)
	return &testDB{url: u, pool: pgtest.Pool(t, u)}
}

func (d *testDB) env() map[string]string { return map[string]string{"DATABASE_URL": d.url} }

// enqueue writes events for aggregate agg and returns their ids.
func (d *testDB) enqueue(t *testing.T, n int, eventType, agg string, ordered bool) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		for i := 0; i < n; i++ {
			id, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{
				AggregateType: "order", AggregateID: agg, EventType: eventType,
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Ordered: ordered,
			})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ordered {
		// What a relay does before its next ordered claim: the events get
		// their seq and heads.
		d.exec(t, `SELECT outbox_resolve_heads($1)`, n)
	}
	return ids
}

func (d *testDB) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// kill makes messages dead, as a dispatcher would after max attempts.
func (d *testDB) kill(t *testing.T, ids ...int64) {
	t.Helper()
	d.exec(t, `UPDATE outbox SET status = 'dead', attempts = 12, last_error = 'permanent: webhook: status 400: bad request' WHERE id = ANY($1)`, ids)
}

func (d *testDB) status(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := d.pool.QueryRow(context.Background(), "SELECT status FROM outbox WHERE id = $1", id).Scan(&s); err != nil {
		t.Fatalf("status of %d: %v", id, err)
	}
	return s
}

func (d *testDB) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := d.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// withPassword returns u with user:password credentials.
func withPassword(t *testing.T, raw, user, password string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// userOf returns the user name in a URL.
func userOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

func mustContain(t *testing.T, r result, in, want string) {
	t.Helper()
	got := r.stdout
	if in == "stderr" {
		got = r.stderr
	}
	if !strings.Contains(got, want) {
		t.Errorf("%s does not contain %q\n%s", in, want, r)
	}
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\n%s", r.code, code, r)
	}
}
