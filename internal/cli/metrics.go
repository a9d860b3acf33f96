package cli

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Health checks behind /healthz.
const (
	checkDB = iota
	checkPublisher
	numChecks
)

var checkNames = [numChecks]string{"database", "publisher"}

// health is the last result of each readiness check.
type health struct {
	mu      sync.Mutex
	checked [numChecks]bool
	errs    [numChecks]error
}

// set records a check result and reports whether readiness of that check
// changed.
func (h *health) set(which int, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := !h.checked[which] || (h.errs[which] == nil) != (err == nil)
	h.checked[which], h.errs[which] = true, err
	return changed
}

// ready reports whether every check passed, and why not.
func (h *health) ready() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var reasons []string
	for i := range numChecks {
		switch {
		case !h.checked[i]:
			reasons = append(reasons, checkNames[i]+": not checked yet")
		case h.errs[i] != nil:
			reasons = append(reasons, checkNames[i]+": "+compactErr(h.errs[i].Error()))
		}
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

func (h *health) up(which int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checked[which] && h.errs[which] == nil
}

// counter is one dispatcher counter exposed as a Prometheus counter.
type counter struct {
	name, help string
	value      func(s *dispatcher.Stats) int64
}

var counters = []counter{
	{"pgoutbox_messages_claimed_total", "Messages claimed under a lease by this process.", func(s *dispatcher.Stats) int64 { return s.Claimed }},
	{"pgoutbox_messages_published_total", "Messages published and finalized done.", func(s *dispatcher.Stats) int64 { return s.Published }},
	{"pgoutbox_messages_retried_total", "Messages rescheduled after a retryable failure.", func(s *dispatcher.Stats) int64 { return s.Retried }},
	{"pgoutbox_messages_deferred_total", "Messages rescheduled by a business defer (attempt refunded).", func(s *dispatcher.Stats) int64 { return s.Deferred }},
	{"pgoutbox_messages_dead_total", "Messages this process sent to dead.", func(s *dispatcher.Stats) int64 { return s.Dead }},
	{"pgoutbox_messages_recovered_total", "Messages claimed from an expired lease and published alone.", func(s *dispatcher.Stats) int64 { return s.Recovered }},
	{"pgoutbox_messages_lease_lost_total", "Fenced writes that changed no row (lease taken over or reaped).", func(s *dispatcher.Stats) int64 { return s.LeaseLost }},
	{"pgoutbox_messages_released_total", "Claimed messages handed back unstarted (shutdown, near expiry).", func(s *dispatcher.Stats) int64 { return s.Released }},
	{"pgoutbox_messages_near_expiry_total", "Messages not started because their lease was too close to expiry.", func(s *dispatcher.Stats) int64 { return s.NearExpiry }},
	{"pgoutbox_messages_unclassified_total", "Unclassified publisher errors left to lease recovery.", func(s *dispatcher.Stats) int64 { return s.Unclassified }},
	{"pgoutbox_messages_reaped_total", "Messages this process's reap sent to dead (lease expired after max attempts).", func(s *dispatcher.Stats) int64 { return s.Reaped }},
	{"pgoutbox_publisher_panics_total", "Publisher panics (treated as crashes).", func(s *dispatcher.Stats) int64 { return s.Panics }},
	{"pgoutbox_lease_extensions_total", "Lease extensions by the heartbeat.", func(s *dispatcher.Stats) int64 { return s.Heartbeats }},
	{"pgoutbox_notifications_total", "NOTIFY wake-ups received.", func(s *dispatcher.Stats) int64 { return s.Notifications }},
	{"pgoutbox_wake_window_polls_total", "Short idle waits inside a wake window after a NOTIFY.", func(s *dispatcher.Stats) int64 { return s.WakePolls }},
	{"pgoutbox_database_errors_total", "Transient database errors retried.", func(s *dispatcher.Stats) int64 { return s.DBErrors }},
	{"pgoutbox_finalize_flushes_total", "Batched finalize statements.", func(s *dispatcher.Stats) int64 { return s.Flushes }},
}

// writeMetrics writes the Prometheus text exposition format (version
// 0.0.4). st is nil until the dispatcher runs (counters read 0); the queue
// gauges appear once the dispatcher has read them.
func writeMetrics(w io.Writer, st *dispatcher.Stats, h *health, now time.Time) {
	var b strings.Builder
	zero := dispatcher.Stats{}
	s := st
	if s == nil {
		s = &zero
	}
	for _, c := range counters {
		header(&b, c.name, c.help, "counter")
		fmt.Fprintf(&b, "%s %d\n", c.name, c.value(s))
	}
	q := s.Queue
	if !q.At.IsZero() {
		header(&b, "pgoutbox_queue_messages", "Outbox messages by status (table-wide, all dispatchers).", "gauge")
		statuses := make([]string, 0, len(q.ByStatus))
		for k := range q.ByStatus {
			statuses = append(statuses, k)
		}
		slices.Sort(statuses)
		for _, k := range statuses {
			fmt.Fprintf(&b, "pgoutbox_queue_messages{status=\"%s\"} %d\n", escapeLabel(k), q.ByStatus[k])
		}
		header(&b, "pgoutbox_queue_oldest_age_seconds", "Age of the oldest undelivered (pending or processing) message.", "gauge")
		fmt.Fprintf(&b, "pgoutbox_queue_oldest_age_seconds %s\n", formatFloat(q.OldestAgeSeconds))
		header(&b, "pgoutbox_leases_expired", "Processing messages past their lease.", "gauge")
		fmt.Fprintf(&b, "pgoutbox_leases_expired %d\n", q.ExpiredLeases)
		header(&b, "pgoutbox_aggregates_blocked", "Ordered aggregates whose head is dead or undelivered for more than 5m.", "gauge")
		fmt.Fprintf(&b, "pgoutbox_aggregates_blocked %d\n", q.BlockedAggregates)
		header(&b, "pgoutbox_queue_stats_age_seconds", "Seconds since the queue gauges were read from the database.", "gauge")
		fmt.Fprintf(&b, "pgoutbox_queue_stats_age_seconds %s\n", formatFloat(now.Sub(q.At).Seconds()))
	}
	writeFlightGauges(&b, s)
	ready, _ := h.ready()
	header(&b, "pgoutbox_up", "Whether the last check of a dependency succeeded (1) or not (0).", "gauge")
	for i := range numChecks {
		fmt.Fprintf(&b, "pgoutbox_up{dependency=\"%s\"} %d\n", checkNames[i], boolInt(h.up(i)))
	}
	header(&b, "pgoutbox_ready", "1 when /healthz answers ok.", "gauge")
	fmt.Fprintf(&b, "pgoutbox_ready %d\n", boolInt(ready))
	_, _ = io.WriteString(w, b.String())
}

func header(b *strings.Builder, name, help, typ string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
