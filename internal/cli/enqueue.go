package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func (a *app) enqueue(ctx context.Context, args []string) error {
	f := newFlags("enqueue", "pgoutbox enqueue --aggregate-type T --aggregate-id ID --event-type E [--payload JSON | -] [flags]",
		"Inserts one event into the outbox in its own transaction (through the same\n"+
			"dispatcher.Enqueue producers use) and prints its id. The payload is a JSON document:\n"+
			"--payload '{...}', or --payload - (or no --payload) to read it from stdin.\n"+
			"Invalid JSON is rejected before anything is written.",
		"  pgoutbox enqueue --aggregate-type order --aggregate-id o-1 --event-type OrderPaid --payload '{\"amount\":1250}'\n"+
			"  echo '{\"amount\":1250}' | pgoutbox enqueue --aggregate-type order --aggregate-id o-1 --event-type OrderPaid\n"+
			"  pgoutbox enqueue --aggregate-type order --aggregate-id o-1 --event-type OrderShipped --ordered \\\n"+
			"      --header tenant=acme --header traceparent=00-... --available-at 2030-01-02T15:04:05Z --payload '{}'")
	dbURL := f.databaseURL()
	aggType := f.String("aggregate-type", "", "aggregate type, e.g. order (required)")
	aggID := f.String("aggregate-id", "", "aggregate id, e.g. o-1 (required)")
	eventType := f.String("event-type", "", "event type, e.g. OrderPaid (required)")
	payload := f.String("payload", "-", "the JSON payload, or - to read it from stdin")
	headers := f.list("header", "a header name=value forwarded by publishers (repeatable)")
	ordered := f.Bool("ordered", false, "deliver in order within the aggregate (after every earlier ordered event of it)")
	availableAt := f.String("available-at", "", "first delivery no earlier than this RFC 3339 time, e.g. 2030-01-02T15:04:05Z (default: now)")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	for _, req := range []struct{ name, value string }{
		{"aggregate-type", *aggType}, {"aggregate-id", *aggID}, {"event-type", *eventType},
	} {
		if req.value == "" {
			return f.usageError("--%s is required", req.name)
		}
	}
	ev := dispatcher.Event{AggregateType: *aggType, AggregateID: *aggID, EventType: *eventType, Ordered: *ordered}
	for _, h := range *headers {
		name, value, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return f.usageError("invalid --header %q: expected name=value, e.g. --header tenant=acme", h)
		}
		if ev.Headers == nil {
			ev.Headers = map[string]string{}
		}
		ev.Headers[name] = value
	}
	if *availableAt != "" {
		t, err := time.Parse(time.RFC3339Nano, *availableAt)
		if err != nil {
			return f.usageError("invalid --available-at %q: expected an RFC 3339 time such as 2030-01-02T15:04:05Z or 2030-01-02T15:04:05+02:00", *availableAt)
		}
		ev.AvailableAt = t
	}

	raw := []byte(*payload)
	source := "--payload"
	if *payload == "-" {
		source = "the payload read from stdin"
		if a.stdinIsTerminal() {
			fmt.Fprintln(a.stderr, "reading the JSON payload from stdin (end with Ctrl-D)...")
		}
		b, err := io.ReadAll(io.LimitReader(a.stdin, dispatcher.MaxPayloadBytesDefault+1))
		if err != nil {
			return failf("enqueue: reading the payload from stdin: %v", err)
		}
		raw = b
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return failf("enqueue: %s is empty: give a JSON document (use {} or null for no data); nothing was written", source)
	}
	if len(raw) > dispatcher.MaxPayloadBytesDefault {
		return failf("enqueue: %s is larger than %d bytes; nothing was written", source, dispatcher.MaxPayloadBytesDefault)
	}
	if err := validJSON(raw); err != nil {
		return failf("enqueue: %s is not valid JSON: %v; nothing was written", source, err)
	}
	ev.Payload = raw

	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return a.dbError("enqueue", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	id, err := dispatcher.Enqueue(ctx, a.dbtx(tx), ev)
	if err != nil {
		if errors.Is(err, dispatcher.ErrInvalidEvent) {
			return failf("enqueue: %s; nothing was written", strings.TrimPrefix(err.Error(), dispatcher.ErrInvalidEvent.Error()+": "))
		}
		return a.dbError("enqueue", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return a.dbError("enqueue: commit", err)
	}
	fmt.Fprintln(a.stdout, id)
	return nil
}

// validJSON reports why raw is not one JSON document.
func validJSON(raw []byte) error {
	if json.Valid(raw) {
		return nil
	}
	var v any
	err := json.Unmarshal(raw, &v)
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("%v (at byte %d)", syn, syn.Offset)
	}
	if err != nil {
		return err
	}
	return errors.New("not a single JSON document")
}
