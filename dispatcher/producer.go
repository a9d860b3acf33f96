package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/dbcopy"
)

// Event is one outbox row to write.
type Event struct {
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload must be a JSON document (validated; stored as jsonb).
	Payload json.RawMessage
	// Headers are forwarded by publishers next to the payload. Optional.
	// The caller's trace context is added as traceparent and tracestate
	// (HeaderTraceParent, HeaderTraceState) unless Headers sets traceparent
	// already (see ProducerConfig.Propagator); the map is not modified.
	Headers map[string]string
	// Ordered asks for per-aggregate order: the event is delivered only after
	// every earlier ordered event of the same AggregateID is done (and a dead
	// predecessor blocks it). Producers can set it per event type through
	// ProducerConfig instead.
	Ordered bool
	// AvailableAt schedules the first delivery attempt no earlier than this
	// time. Zero means now (database clock).
	AvailableAt time.Time
}

// ProducerConfig configures a Producer. The zero value is valid.
type ProducerConfig struct {
	// OrderedEventTypes and OrderedAggregateTypes mark matching events as
	// Ordered, so ordering is chosen per event type or aggregate type in one
	// table: order only the event types that need it.
	// Default to none.
	OrderedEventTypes     []string
	OrderedAggregateTypes []string
	// MaxPayloadBytes rejects larger payloads.
	// Defaults to MaxPayloadBytesDefault (1 MiB).
	MaxPayloadBytes int
	// MaxIdentifierBytes bounds AggregateType, AggregateID and EventType.
	// Defaults to MaxIdentifierBytesDefault (255).
	MaxIdentifierBytes int
	// Propagator writes the trace context of the ctx given to Enqueue and
	// EnqueueMany into each event's headers, unless the event sets
	// traceparent itself, so that the publish links to (or continues) the
	// request that produced the event. Defaults to
	// propagation.TraceContext{} (traceparent, tracestate); use
	// propagation.NewCompositeTextMapPropagator(propagation.TraceContext{},
	// propagation.Baggage{}) to store baggage as well.
	Propagator propagation.TextMapPropagator
	// DisableTraceCapture stores no trace context. Defaults to false.
	DisableTraceCapture bool
}

// Producer writes events into the outbox inside the caller's transaction.
type Producer struct {
	cfg ProducerConfig
}

// NewProducer returns a Producer.
func NewProducer(cfg ProducerConfig) *Producer {
	if cfg.MaxPayloadBytes <= 0 {
		cfg.MaxPayloadBytes = MaxPayloadBytesDefault
	}
	if cfg.MaxIdentifierBytes <= 0 {
		cfg.MaxIdentifierBytes = MaxIdentifierBytesDefault
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	return &Producer{cfg: cfg}
}

var defaultProducer = NewProducer(ProducerConfig{})

// Enqueue writes ev through tx — the caller's business transaction (a pgx.Tx,
// or anything satisfying db.DBTX) — so the event commits or rolls back with
// the business change. The same statement queues the NOTIFY that wakes an
// idle dispatcher at COMMIT. It returns the outbox id. Invalid events are
// rejected with an error wrapping ErrInvalidEvent before anything is written.
func Enqueue(ctx context.Context, tx db.DBTX, ev Event) (int64, error) {
	return defaultProducer.Enqueue(ctx, tx, ev)
}

// EnqueueMany writes events with one COPY through tx (a pgx.Tx, or anything
// satisfying dbcopy.DBTX: db.DBTX plus CopyFrom). Every event is validated
// first; one invalid event rejects the whole call and writes nothing. After
// the COPY it runs OutboxWake, which queues the NOTIFY that wakes an idle
// dispatcher at COMMIT.
// AvailableAt is not supported here (rows are available at once).
func EnqueueMany(ctx context.Context, tx dbcopy.DBTX, events []Event) (int64, error) {
	return defaultProducer.EnqueueMany(ctx, tx, events)
}

// Enqueue is the package-level Enqueue with this producer's configuration.
func (p *Producer) Enqueue(ctx context.Context, tx db.DBTX, ev Event) (int64, error) {
	params, err := p.prepare(ctx, ev)
	if err != nil {
		return 0, err
	}
	arg := db.OutboxEnqueueParams{
		AggregateType: params.AggregateType,
		AggregateID:   params.AggregateID,
		EventType:     params.EventType,
		Payload:       params.Payload,
		Headers:       params.Headers,
		Ordered:       params.Ordered,
	}
	if !ev.AvailableAt.IsZero() {
		at := ev.AvailableAt
		arg.AvailableAt = &at
	}
	id, err := db.New(tx).OutboxEnqueue(ctx, arg)
	if err != nil {
		return 0, fmt.Errorf("outbox: enqueue: %w", err)
	}
	return id, nil
}

// EnqueueMany is the package-level EnqueueMany with this producer's
// configuration.
func (p *Producer) EnqueueMany(ctx context.Context, tx dbcopy.DBTX, events []Event) (int64, error) {
	rows := make([]dbcopy.OutboxEnqueueManyParams, 0, len(events))
	for i, ev := range events {
		if !ev.AvailableAt.IsZero() {
			return 0, fmt.Errorf("%w: event %d: AvailableAt is not supported by EnqueueMany; use Enqueue", ErrInvalidEvent, i)
		}
		r, err := p.prepare(ctx, ev)
		if err != nil {
			return 0, fmt.Errorf("event %d: %w", i, err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	n, err := dbcopy.New(tx).OutboxEnqueueMany(ctx, rows)
	if err != nil {
		return n, fmt.Errorf("outbox: enqueue many: %w", err)
	}
	// COPY runs no expression: the wake-up is a statement of its own.
	if err := db.New(tx).OutboxWake(ctx); err != nil {
		return n, fmt.Errorf("outbox: enqueue many: wake-up: %w", err)
	}
	return n, nil
}

var emptyHeaders = []byte(`{}`)

func (p *Producer) prepare(ctx context.Context, ev Event) (dbcopy.OutboxEnqueueManyParams, error) {
	if err := p.validate(ev); err != nil {
		return dbcopy.OutboxEnqueueManyParams{}, err
	}
	headers := emptyHeaders
	if h := p.captureTrace(ctx, ev.Headers); len(h) > 0 {
		b, err := json.Marshal(h)
		if err != nil {
			return dbcopy.OutboxEnqueueManyParams{}, fmt.Errorf("%w: headers: %v", ErrInvalidEvent, err)
		}
		headers = b
	}
	return dbcopy.OutboxEnqueueManyParams{
		AggregateType: ev.AggregateType,
		AggregateID:   ev.AggregateID,
		EventType:     ev.EventType,
		Payload:       bytes.TrimSpace(ev.Payload),
		Headers:       headers,
		Ordered: ev.Ordered ||
			slices.Contains(p.cfg.OrderedEventTypes, ev.EventType) ||
			slices.Contains(p.cfg.OrderedAggregateTypes, ev.AggregateType),
	}, nil
}

func (p *Producer) validate(ev Event) error {
	for _, f := range []struct{ name, value string }{
		{"AggregateType", ev.AggregateType},
		{"AggregateID", ev.AggregateID},
		{"EventType", ev.EventType},
	} {
		if f.value == "" {
			return fmt.Errorf("%w: %s is empty", ErrInvalidEvent, f.name)
		}
		if len(f.value) > p.cfg.MaxIdentifierBytes {
			return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidEvent, f.name, len(f.value), p.cfg.MaxIdentifierBytes)
		}
		if !utf8.ValidString(f.value) || bytes.IndexByte([]byte(f.value), 0) >= 0 {
			return fmt.Errorf("%w: %s is not valid UTF-8 text", ErrInvalidEvent, f.name)
		}
	}
	if len(ev.Payload) == 0 {
		return fmt.Errorf("%w: Payload is empty (use {} or null for no data)", ErrInvalidEvent)
	}
	if len(ev.Payload) > p.cfg.MaxPayloadBytes {
		return fmt.Errorf("%w: Payload is %d bytes, the limit is %d", ErrInvalidEvent, len(ev.Payload), p.cfg.MaxPayloadBytes)
	}
	if !json.Valid(ev.Payload) {
		return fmt.Errorf("%w: Payload is not valid JSON", ErrInvalidEvent)
	}
	// What jsonb refuses must be refused here: a failed INSERT would abort
	// the caller's business transaction.
	if !utf8.Valid(ev.Payload) {
		return fmt.Errorf("%w: Payload is not valid UTF-8", ErrInvalidEvent)
	}
	if bytes.Contains(ev.Payload, []byte(`\u`)) {
		if err := checkJSONEscapes(ev.Payload); err != nil {
			return fmt.Errorf("%w: Payload %v, which PostgreSQL jsonb cannot store", ErrInvalidEvent, err)
		}
	}
	if err := checkJSONNumbers(ev.Payload, p.cfg.MaxPayloadBytes); err != nil {
		return fmt.Errorf("%w: Payload %v", ErrInvalidEvent, err)
	}
	for k, v := range ev.Headers {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) ||
			strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: header %q: names must be non-empty, and names and values valid UTF-8 without NUL", ErrInvalidEvent, k)
		}
	}
	return nil
}

// checkJSONEscapes walks the \u escapes inside the strings of a valid JSON
// text and reports the ones jsonb refuses: \u0000, and a UTF-16 surrogate
// that is not part of a high-low pair.
func checkJSONEscapes(raw []byte) error {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(raw) {
				return nil
			}
			if raw[i+1] != 'u' {
				i++ // an escaped character, e.g. \\ or \"
				continue
			}
			r, ok := hex4(raw, i+2)
			if !ok {
				return nil // json.Valid already vouched for the text
			}
			switch {
			case r == 0:
				return errors.New("contains \\u0000")
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := hex4(raw, i+8)
				if i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' || !ok || lo < 0xDC00 || lo > 0xDFFF {
					return fmt.Errorf("contains an unpaired surrogate \\u%04x", r)
				}
				i += 11
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("contains an unpaired surrogate \\u%04x", r)
			default:
				i += 5
			}
		}
	}
	return nil
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
