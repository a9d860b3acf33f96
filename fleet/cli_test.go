package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/cli"
)

// lockedBuffer is a bytes.Buffer safe for a running command's writes and
// the test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Two relays, each `pgoutbox run` with the fifty databases repeated
// (polling, one pooled connection per database), over the same fifty
// databases: every event is published, both relays publish, every row
// ends done. (Here rather than with the other command tests: a hundred
// connections of its own, which this package's server has.)
func TestTwoRelayCommandsOverTheSameFiftyDatabases(t *testing.T) {
	dbs := migrated(t, 50)
	args := []string{"run", "--publisher", "stdout", "--stdout-cloudevents", "--wake", "poll", "--poll-max", "200ms",
		"--max-conns-per-database", "1", "--batch", "5", "--log-level", "warn"}
	for _, d := range dbs {
		enqueue(t, d.URL, 10, "o-1", false)
		args = append(args, "--database-url", d.URL)
	}
	type relay struct {
		out, errOut lockedBuffer
		code        chan int
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var relays []*relay
	for _, owner := range []string{"one", "two"} {
		r := &relay{code: make(chan int, 1)}
		go func() {
			r.code <- cli.Main(ctx, append(slices.Clip(args), "--owner", owner), strings.NewReader(""), &r.out, &r.errOut,
				func(string) string { return "" })
		}()
		relays = append(relays, r)
	}
	seen := func() map[string]int {
		by := map[string]int{}
		for i, r := range relays {
			for _, line := range strings.Split(strings.TrimSpace(r.out.String()), "\n") {
				var l struct {
					ID string            `json:"id"`
					CE map[string]string `json:"ce"`
				}
				if line == "" || json.Unmarshal([]byte(line), &l) != nil {
					continue
				}
				by[l.CE["source"]+"|"+l.ID] |= 1 << i
			}
		}
		return by
	}
	waitFor(t, 2*time.Minute, "500 events published", func() bool { return len(seen()) == 500 })
	for _, d := range dbs {
		waitFor(t, time.Minute, d.Name+" finalized", func() bool { return count(t, d.URL, "status = 'done'") == 10 })
	}
	cancel()
	both := 0
	for _, mask := range seen() {
		both |= mask
	}
	for i, r := range relays {
		if code := <-r.code; code != 0 {
			t.Errorf("relay %d exited %d\n%s", i+1, code, r.errOut.String())
		}
	}
	if both != 3 {
		t.Errorf("published by relays %b, want both (11)", both)
	}
}
