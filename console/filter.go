package console

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
)

// filter is the filter form of the messages and dead-letter pages.
type filter struct {
	Status        string
	EventType     string
	AggregateType string
	AggregateID   string
	From, To      string // as typed: 2026-12-01T08:30 (UTC) or RFC 3339

	from, to *time.Time
}

var statuses = []string{"pending", "processing", "done", "dead", "skipped"}

// timeRangeSlack widens the id range found for a time range on each side:
// ids follow insertion order and created_at is the producer's transaction
// start, so a row of a transaction that stayed open across the edge of the
// range can sit on the other side of the id boundary. The created_at filter
// itself is exact.
const timeRangeSlack = time.Minute

func parseFilter(r *http.Request, withStatus bool) (filter, error) {
	get := func(k string) string { return strings.TrimSpace(r.FormValue(k)) }
	f := filter{EventType: get("event_type"), AggregateType: get("aggregate_type"),
		AggregateID: get("aggregate_id"), From: get("from"), To: get("to")}
	if withStatus {
		f.Status = get("status")
		if f.Status != "" && !contains(statuses, f.Status) {
			return f, badRequest("status must be one of %s, got %q", strings.Join(statuses, ", "), f.Status)
		}
	}
	for _, p := range []struct {
		name string
		in   string
		out  **time.Time
	}{{"from", f.From, &f.from}, {"to", f.To, &f.to}} {
		if p.in == "" {
			continue
		}
		t, err := parseTime(p.in)
		if err != nil {
			return f, badRequest("%s: expected a UTC time such as 2026-12-01T08:30 or an RFC 3339 time, got %q", p.name, p.in)
		}
		*p.out = &t
	}
	if f.from != nil && f.to != nil && !f.from.Before(*f.to) {
		return f, badRequest("from (%s) must be before to (%s)", f.From, f.To)
	}
	return f, nil
}

func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("bad time")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// values is the filter as query parameters (links, hidden form fields).
func (f filter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"status": f.Status, "event_type": f.EventType, "aggregate_type": f.AggregateType,
		"aggregate_id": f.AggregateID, "from": f.From, "to": f.To} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Active reports whether any filter is set.
func (f filter) Active() bool { return len(f.values()) > 0 }

// Describe is the filter in words, for the confirmation page.
func (f filter) Describe() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" = "+strconv.Quote(v))
		}
	}
	add("status", f.Status)
	add("event type", f.EventType)
	add("aggregate type", f.AggregateType)
	add("aggregate id", f.AggregateID)
	add("created from", f.From)
	add("created before", f.To)
	if len(parts) == 0 {
		return "no filter (every dead message)"
	}
	return strings.Join(parts, ", ")
}

// idRange turns the time range into [minID, beforeID) on the primary key
// (a binary search of about log2(ids) probes per bound, run by the database
// in one round trip), so that a time range starts the keyset scan where the
// range is instead of paging down to it.
func (c *Console) idRange(ctx context.Context, f filter) (minID, beforeID int64, err error) {
	if f.from == nil && f.to == nil {
		return 0, math.MaxInt64, nil
	}
	var p consoledb.OutboxConsoleIDRangeParams
	if f.from != nil {
		t := f.from.Add(-timeRangeSlack)
		p.CreatedFrom = &t
	}
	if f.to != nil {
		t := f.to.Add(timeRangeSlack)
		p.CreatedTo = &t
	}
	r, err := c.cq.OutboxConsoleIDRange(ctx, p)
	if err != nil {
		return 0, 0, err
	}
	return r.MinID, r.BeforeID, nil
}

// parseID reads a positive id.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("expected a message id (a positive whole number), got %q", s)
	}
	return id, nil
}

// parseBefore reads the keyset cursor "before" (exclusive), if any.
func parseBefore(r *http.Request, beforeID int64) (int64, error) {
	s := r.FormValue("before")
	if s == "" {
		return beforeID, nil
	}
	id, err := parseID(s)
	if err != nil {
		return 0, err
	}
	return min(id, beforeID), nil
}
