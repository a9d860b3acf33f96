package pgtest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// markerChannel carries Notifications' own markers.
const markerChannel = "pgtest_marker"

// Notifications LISTENs on channel on a connection of its own to url and
// returns that connection and a counter of the notifications on channel
// received since the counter's last call. Each call sends a marker on
// another channel from the same connection and counts up to it: a listener
// gets notifications in the order their transactions committed, so the
// count holds every notification committed before the call, however late a
// loaded machine delivers them, and none after it.
func Notifications(t testing.TB, url, channel string) (*pgx.Conn, func() int) {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()+"; LISTEN "+markerChannel); err != nil {
		t.Fatal(err)
	}
	markers := 0
	return listener, func() int {
		t.Helper()
		markers++
		marker := strconv.Itoa(markers)
		if _, err := listener.Exec(ctx, "SELECT pg_notify($1, $2)", markerChannel, marker); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			note, err := listener.WaitForNotification(wctx)
			cancel()
			switch {
			case err != nil:
				t.Fatalf("waiting for the test's own notification %q after %d on channel %s: %v", marker, n, channel, err)
			case note.Channel == channel:
				n++
			case note.Channel == markerChannel && note.Payload == marker:
				return n
			}
		}
	}
}
