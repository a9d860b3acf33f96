package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// Fuzz targets for what parses outside input on the producer side (events:
// identifiers, payload, headers) and the dispatcher's configuration.
//
//	go test -run '^$' -fuzz FuzzEventValidation -fuzztime 30s ./dispatcher/
//	go test -run '^$' -fuzz FuzzConfigValidate -fuzztime 30s ./dispatcher/
//
// Set TEST_DATABASE_URL to a running server when fuzzing: otherwise every
// fuzz worker process starts its own throwaway cluster (TestMain), and the
// fuzzer stalls while it does.
//
// Findings of FuzzEventValidation, open at the time of writing (validation
// accepts them, PostgreSQL refuses the INSERT and the caller's transaction
// is aborted): a header name or value containing NUL (encoded as \u0000,
// which jsonb refuses); invalid UTF-8 bytes inside a payload string
// (json.Valid accepts them); a lone UTF-16 surrogate escape in a payload
// string ("\ud800").

// FuzzEventValidation: an event either is rejected with ErrInvalidEvent
// before any SQL is sent (the caller's transaction stays usable), or it is
// stored and reads back identical: text fields byte for byte, headers
// exactly, the payload as the same JSON value (jsonb normalizes spacing and
// key order). A database error is a bug: validation let through something
// PostgreSQL refuses, and the caller's transaction is now aborted.
func FuzzEventValidation(f *testing.F) {
	f.Add("order", "o-1", "OrderPaid", []byte(`{"amount":1200}`), "traceparent", "00-abc-01", false)
	f.Add("'); DROP TABLE outbox; --", "a'b", `E'\\'`, []byte(`{"sql":"'); DROP TABLE outbox; --"}`), "x-q", `"; --`, true)
	f.Add("t", "ünïcødé ✓", "É", []byte(`["é", "\u00e9", "\ud83d\ude00"]`), "k", "ü", false)
	f.Add("t", "id", "e", []byte(`{"a":1,"a":2}`), "", "", false)
	f.Add("t", "id", "e", []byte(`1e400`), "", "", false)
	f.Add("t", "id", "e", []byte(`-0.0000000000000000000000001`), "", "", false)
	f.Add("t", "id", "e", []byte(`{"nested":{"deep":[[[[[]]]]]}}`), "", "", false)
	f.Add("t", "id", "e", []byte(` null `), "", "", false)
	f.Add("t", "id", "e", []byte(`{"a":"x\u0000y"}`), "", "", false)
	f.Add("t", "id", "e", []byte(`{`), "", "", false)
	f.Add("", "id", "e", []byte(`{}`), "", "", false)
	f.Add("t", strings.Repeat("x", 256), "e", []byte(`{}`), "", "", false)
	f.Add("t", "id\x00", "e", []byte(`{}`), "", "", false)
	f.Add("t", "id", "\xff\xfe", []byte(`{}`), "", "", false)
	f.Add("t", "id", "e", []byte(`"\\u0000"`), "h", "v", false)
	// Numbers numeric cannot hold (22003 before the bound), and payloads
	// that expand past the limit when rendered (issue 12, item 1).
	f.Add("t", "id", "e", []byte(`1e131072`), "", "", false)
	f.Add("t", "id", "e", []byte(`1e-16384`), "", "", false)
	f.Add("t", "id", "e", []byte(`{"a":[-0.5e-16383, 2E+131071]}`), "", "", false)
	f.Add("t", "id", "e", []byte(`[1e999999999999999999]`), "", "", false)
	f.Add("t", "id", "e", []byte("["+strings.Repeat("1e131071,", 9)+"0]"), "", "", false)

	// One database for every input: each runs in a transaction that is
	// rolled back.
	fuzzPool := pgtest.Pool(f, pgtest.NewURL(f))
	f.Fuzz(func(t *testing.T, aggType, aggID, evType string, payload []byte, hk, hv string, ordered bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev := dispatcher.Event{AggregateType: aggType, AggregateID: aggID, EventType: evType, Payload: payload, Ordered: ordered}
		if hk != "" || hv != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		tx, err := fuzzPool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck

		id, err := dispatcher.Enqueue(ctx, tx, ev)
		if errors.Is(err, dispatcher.ErrInvalidEvent) {
			// Rejected before any SQL: the transaction is still usable.
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatalf("transaction unusable after a rejected event: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("accepted by validation but refused by the database (the caller's transaction is now aborted): %v\nevent: %q %q %q payload %q headers %q",
				err, aggType, aggID, evType, payload, ev.Headers)
		}
		var gotType, gotID, gotEv string
		var gotPayload, gotHeaders []byte
		var gotOrdered bool
		err = tx.QueryRow(ctx, `SELECT aggregate_type, aggregate_id, event_type, payload::text, headers::text, ordered FROM outbox WHERE id = $1`, id).
			Scan(&gotType, &gotID, &gotEv, &gotPayload, &gotHeaders, &gotOrdered)
		if err != nil {
			t.Fatal(err)
		}
		if gotType != aggType || gotID != aggID || gotEv != evType || gotOrdered != ordered {
			t.Fatalf("round trip changed the fields: got (%q, %q, %q, %v), want (%q, %q, %q, %v)",
				gotType, gotID, gotEv, gotOrdered, aggType, aggID, evType, ordered)
		}
		if !sameJSON(t, gotPayload, payload) {
			t.Fatalf("payload changed: stored %s, sent %s", gotPayload, payload)
		}
		var headers map[string]string
		if err := json.Unmarshal(gotHeaders, &headers); err != nil {
			t.Fatalf("headers %s: %v", gotHeaders, err)
		}
		for k, v := range ev.Headers {
			if headers[k] != v {
				t.Fatalf("header %q: stored %q, sent %q", k, headers[k], v)
			}
		}
		if len(headers) != len(ev.Headers) {
			t.Fatalf("headers: stored %q, sent %q", headers, ev.Headers)
		}
	})
}

// sameJSON compares two JSON documents as values; numbers are compared
// exactly (jsonb keeps numeric precision, so float64 would be wrong both
// ways).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	decode := func(raw []byte) any {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", raw, err)
		}
		return v
	}
	return jsonValueEqual(decode(a), decode(b))
}

func jsonValueEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, _, err1 := big.ParseFloat(string(x), 10, 4096, big.ToNearestEven)
		fy, _, err2 := big.ParseFloat(string(y), 10, 4096, big.ToNearestEven)
		if err1 != nil || err2 != nil {
			return string(x) == string(y)
		}
		return fx.Cmp(fy) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonValueEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonValueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// FuzzConfigValidate: New never panics; it either accepts the
// configuration or rejects it with ErrInvalidConfig naming a field. An
// accepted configuration honours the documented constraints.
func FuzzConfigValidate(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, 0, 0, 0, 0, 0, "")
	f.Add(int64(time.Second), int64(2*time.Second), int64(0), int64(-1), int64(0), int64(0), int64(0), int64(0), 50, 12, 16, 500, 0, 0, "outbox")
	f.Add(int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), -1, -1, -1, -1, -1, -1, "x; DROP TABLE outbox")
	f.Add(int64(1<<62), int64(1<<62), int64(1<<61), int64(1), int64(1<<62), int64(1), int64(1<<62), int64(1), 10000, 1<<30, 1<<30, 1, 2, 2, "ÿ")
	f.Add(int64(10*time.Millisecond), int64(time.Millisecond), int64(5*time.Millisecond), int64(0), int64(0), int64(0), int64(0), int64(0), 1, 1, 1, 1, 0, 0, "_1")

	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })
	fields := []string{"Batch", "Lease", "MaxAttempts", "Concurrency", "PublishTimeout", "HeartbeatInterval", "PollInterval", "WakeWindow",
		"BackoffBase", "BackoffCap", "MaxDeferAge", "FinalizeBatch", "FinalizeDelay", "ShutdownTimeout", "ReapInterval",
		"UnclassifiedErrors", "Claim", "Channel"}
	f.Fuzz(func(t *testing.T, lease, publishTimeout, heartbeat, poll, backoffBase, backoffCap, shutdown, reap int64,
		batch, maxAttempts, concurrency, finalizeBatch, unclassified, claim int, channel string) {
		pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/x") // lazy: never dialled
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		cfg := dispatcher.Config{
			Lease: time.Duration(lease), PublishTimeout: time.Duration(publishTimeout), HeartbeatInterval: time.Duration(heartbeat),
			PollInterval: time.Duration(poll), BackoffBase: time.Duration(backoffBase), BackoffCap: time.Duration(backoffCap),
			ShutdownTimeout: time.Duration(shutdown), ReapInterval: time.Duration(reap), MaxDeferAge: time.Duration(reap),
			FinalizeDelay: time.Duration(poll), StatsInterval: time.Duration(heartbeat),
			Batch: batch, MaxAttempts: maxAttempts, Concurrency: concurrency, FinalizeBatch: finalizeBatch,
			UnclassifiedErrors: dispatcher.UnclassifiedPolicy(unclassified), Claim: dispatcher.ClaimMode(claim), Channel: channel,
		}
		d, err := dispatcher.New(pool, pub, cfg)
		if err != nil {
			if !errors.Is(err, dispatcher.ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
			named := false
			for _, name := range fields {
				named = named || strings.Contains(err.Error(), name)
			}
			if !named {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		// Accepted: the documented constraints hold on what was given.
		eff := func(v, def time.Duration) time.Duration {
			if v == 0 {
				return def
			}
			return v
		}
		l, pt := eff(cfg.Lease, dispatcher.LeaseDefault), eff(cfg.PublishTimeout, dispatcher.PublishTimeoutDefault)
		switch {
		case l < 10*time.Millisecond:
			t.Fatalf("accepted Lease %s", l)
		case cfg.HeartbeatInterval == 0 && pt >= l:
			t.Fatalf("accepted PublishTimeout %s >= Lease %s without heartbeat", pt, l)
		case cfg.HeartbeatInterval > l/2:
			t.Fatalf("accepted HeartbeatInterval %s > Lease/2 (%s)", cfg.HeartbeatInterval, l)
		case cfg.Batch < 0 || cfg.Batch > 10000 || cfg.MaxAttempts < 0 || cfg.Concurrency < 0:
			t.Fatalf("accepted Batch %d MaxAttempts %d Concurrency %d", cfg.Batch, cfg.MaxAttempts, cfg.Concurrency)
		case cfg.Channel != "" && !plainIdentifier(cfg.Channel):
			t.Fatalf("accepted Channel %q", cfg.Channel)
		}
		if d.Owner() == "" {
			t.Fatal("empty owner")
		}
	})
}

func plainIdentifier(s string) bool {
	if len(s) > 63 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
