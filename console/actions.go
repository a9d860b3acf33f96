package console

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// Actions go through two POSTs: /confirm shows what is about to change (the
// selected ids, or the dead messages matching a filter, listed by id), /apply
// changes exactly those ids and reports what changed. Both require the CSRF
// token and are refused in read-only mode.

const (
	maxSelected  = 10000 // ids one form may select, and ids one confirmation of a filter pins
	maxReasonLen = 200
	shownIDs     = 200 // ids listed on confirmation and result pages
)

// action is a parsed action form.
type action struct {
	Verb    string  // retry, skip, redeliver
	Scope   string  // selected, filter
	IDs     []int64 // selected, or (filter scope) the dead ids the confirmation listed
	Filter  filter
	Reason  string
	Back    string // page to return to
	Hidden  map[string]string
	IDsText string // the ids, space-separated (hidden field)
}

func (c *Console) parseAction(r *http.Request) (action, error) {
	a := action{Verb: r.PostFormValue("action"), Scope: r.PostFormValue("scope"), Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	if do := r.PostFormValue("do"); do != "" { // the dead page's buttons: retry-selected, skip-filter, ...
		a.Verb, a.Scope, _ = strings.Cut(do, "-")
	}
	if a.Verb != "retry" && a.Verb != "skip" && a.Verb != "redeliver" {
		return a, badRequest("action must be retry, skip or redeliver, got %q", a.Verb)
	}
	if a.Verb == "redeliver" && a.Scope != "selected" {
		return a, badRequest("redeliver acts on selected messages only, got scope %q", a.Scope)
	}
	a.Back = c.cfg.Prefix + "/dead"
	if b := r.PostFormValue("back"); strings.HasPrefix(b, c.cfg.Prefix+"/") && !strings.HasPrefix(b, "//") && !strings.Contains(b, "\\") {
		a.Back = b
	}
	if utf8.RuneCountInString(a.Reason) > maxReasonLen {
		return a, badRequest("the reason is longer than %d characters", maxReasonLen)
	}
	switch a.Scope {
	case "selected", "filter":
		var fields []string
		for _, v := range r.PostForm["id"] {
			fields = append(fields, strings.Fields(v)...)
		}
		for _, s := range fields {
			id, err := parseID(s)
			if err != nil {
				return a, err
			}
			a.IDs = append(a.IDs, id)
		}
		slices.Sort(a.IDs)
		a.IDs = slices.Compact(a.IDs)
		if len(a.IDs) > maxSelected {
			return a, badRequest("%d messages selected; at most %d at once (use \"all matching this filter\")", len(a.IDs), maxSelected)
		}
		a.IDsText = idsText(a.IDs)
		if a.Scope == "selected" {
			if len(a.IDs) == 0 {
				return a, badRequest("no message selected: tick the rows to act on, or use the buttons for all messages matching the filter")
			}
			break
		}
		f, err := parseFilter(r, false)
		if err != nil {
			return a, err
		}
		a.Filter = f
	default:
		return a, badRequest("scope must be selected or filter, got %q", a.Scope)
	}
	a.Hidden = map[string]string{}
	for k, v := range a.Filter.values() {
		a.Hidden[k] = v[0]
	}
	return a, nil
}

// guard rejects state-changing requests in read-only mode and without a
// valid CSRF token. It reports whether the request may go on.
func (c *Console) guard(w http.ResponseWriter, r *http.Request, start time.Time) bool {
	if c.cfg.ReadOnly {
		c.log.Warn("console: action refused: read-only", slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
		c.fail(w, r, start, &httpError{status: http.StatusForbidden, msg: "this console is read-only (--read-only): nothing changed"})
		return false
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, start, badRequest("bad form: %v", err))
		return false
	}
	if !c.checkCSRF(r) {
		c.log.Warn("console: action refused: missing or invalid CSRF token", slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
		c.fail(w, r, start, &httpError{status: http.StatusForbidden,
			msg: "missing or invalid CSRF token (reload the page and try again): nothing changed"})
		return false
	}
	return true
}

type confirmPage struct {
	action
	Count    int64 // messages the action changes: the ids listed
	Matching int64 // filter scope: dead messages matching (up to CountCap)
	Capped   bool  // Matching reached CountCap
	More     bool  // filter scope: more match than one confirmation pins (maxSelected)
	ShownIDs []int64
}

// idsText is ids space-separated, for a hidden form field.
func idsText(ids []int64) string {
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(strs, " ")
}

func (c *Console) confirm(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if !c.guard(w, r, start) {
		return
	}
	a, err := c.parseAction(r)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	p := confirmPage{action: a}
	if a.Scope == "filter" {
		// The action will change exactly the dead messages listed now
		// (the lowest maxSelected ids): a message that dies later, even
		// one with a lower id, is never touched.
		ctx := r.Context()
		minID, beforeID, err := c.idRange(ctx, a.Filter)
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
		params := consoledb.OutboxConsoleDeadIDsParams{
			AfterID: minID - 1, MaxID: min(beforeID-1, math.MaxInt64-1), MaxRows: maxSelected,
			EventType: opt(a.Filter.EventType), AggregateType: opt(a.Filter.AggregateType), AggregateID: opt(a.Filter.AggregateID),
			CreatedFrom: a.Filter.from, CreatedTo: a.Filter.to}
		ids, err := c.cq.OutboxConsoleDeadIDs(ctx, params)
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
		p.IDs, p.IDsText = ids, idsText(ids)
		p.Matching = int64(len(ids))
		if len(ids) == maxSelected {
			m, err := c.cq.OutboxConsoleDeadMatching(ctx, consoledb.OutboxConsoleDeadMatchingParams{
				MinID: minID, MaxID: params.MaxID, Cap: int32(c.cfg.CountCap),
				EventType: params.EventType, AggregateType: params.AggregateType, AggregateID: params.AggregateID,
				CreatedFrom: params.CreatedFrom, CreatedTo: params.CreatedTo})
			if err != nil {
				c.fail(w, r, start, err)
				return
			}
			p.Matching, p.Capped = m.Matching, m.Matching >= int64(c.cfg.CountCap)
			p.More = m.Matching > int64(len(ids))
		}
	}
	p.Count = int64(len(p.IDs))
	p.ShownIDs = p.IDs[:min(len(p.IDs), shownIDs)]
	c.render(w, r, start, http.StatusOK, "confirm", "Confirm", "dead", 0, p)
}

type resultPage struct {
	action
	Requested int64 // selected ids, or the confirmed count
	Changed   []int64
	NotDead   []int64 // selected ids that were not dead (redeliver: not done, or ordered), left alone
	Shown     []int64
	RetryNow  bool // a pending message in backoff was made available now
}

func (c *Console) apply(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if !c.guard(w, r, start) {
		return
	}
	a, err := c.parseAction(r)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	if a.Verb == "skip" && a.Reason == "" {
		c.fail(w, r, start, badRequest("skipping needs a reason (it is kept in last_error): nothing changed"))
		return
	}
	if a.Scope == "filter" && len(a.IDs) == 0 {
		c.fail(w, r, start, badRequest("no confirmed messages: confirm the action first; nothing changed"))
		return
	}
	ctx := r.Context()
	p := resultPage{action: a}
	// A started action finishes even if the browser goes away.
	ctx = context.WithoutCancel(ctx)
	p.Requested = int64(len(a.IDs))
	for chunk := range slices.Chunk(a.IDs, c.cfg.BulkBatch) {
		changed, err := c.change(ctx, r, a, chunk)
		p.Changed = append(p.Changed, changed...)
		if err != nil {
			c.logAction(r, a, p, err)
			c.fail(w, r, start, err)
			return
		}
	}
	slices.Sort(p.Changed)
	for _, id := range a.IDs {
		if _, ok := slices.BinarySearch(p.Changed, id); !ok {
			p.NotDead = append(p.NotDead, id)
		}
	}
	if a.Scope == "selected" && a.Verb == "retry" && len(a.IDs) == 1 && len(p.Changed) == 0 {
		// The head of a blocked aggregate, or a message detail: pending in
		// backoff is retried by making it available now.
		ids, err := c.cq.OutboxConsoleRetryPendingNow(ctx, a.IDs[0])
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
		if len(ids) > 0 {
			p.Changed, p.NotDead, p.RetryNow = ids, nil, true
		}
	}
	if (a.Verb == "retry" || a.Verb == "redeliver") && len(p.Changed) > 0 {
		if err := c.q.OutboxNotify(ctx); err != nil {
			c.log.Warn("console: notify after retry", slog.String("error", c.secrets.Scrub(err.Error())))
		}
	}
	c.logAction(r, a, p, nil)
	p.Shown = p.Changed[:min(len(p.Changed), shownIDs)]
	c.render(w, r, start, http.StatusOK, "result", "Result", "dead", 0, p)
}

// change runs one batch of the action; it returns the ids it changed.
func (c *Console) change(ctx context.Context, r *http.Request, a action, ids []int64) ([]int64, error) {
	var changed []int64
	var err error
	switch a.Verb {
	case "redeliver":
		// Recorded in each message's attempt history with who asked (the
		// audit record, next to the log line of logAction).
		var rows []*opsdb.OutboxRedeliverDoneRow
		rows, err = c.oq.OutboxRedeliverDone(ctx, opsdb.OutboxRedeliverDoneParams{Ids: ids, Actor: consoleActor(r)})
		for _, row := range rows {
			if row.Result == "redelivered" {
				changed = append(changed, row.ID)
			}
		}
	case "retry":
		changed, err = c.cq.OutboxConsoleRedriveDeadMany(ctx, ids)
	case "skip":
		changed, err = c.cq.OutboxConsoleSkipDeadMany(ctx, consoledb.OutboxConsoleSkipDeadManyParams{Ids: ids, Reason: a.Reason})
	default:
		err = errors.New("unknown action " + a.Verb)
	}
	slices.Sort(changed)
	return changed, err
}

// consoleActor names who acts through the console, for the attempt
// history: the Basic-auth user (none without --auth) and the remote address.
func consoleActor(r *http.Request) string {
	user, remote := actor(r)
	if user == "" {
		return "console from " + remote
	}
	return "console " + user + " from " + remote
}

// logAction records what an action changed.
func (c *Console) logAction(r *http.Request, a action, p resultPage, err error) {
	user, remote := actor(r)
	attrs := []any{
		slog.String("action", a.Verb), slog.String("scope", a.Scope),
		slog.Int("changed", len(p.Changed)), slog.Any("changed_ids", p.Changed[:min(len(p.Changed), 100)]),
		slog.String("user", user), slog.String("remote", remote),
	}
	if a.Verb == "skip" {
		attrs = append(attrs, slog.String("reason", a.Reason))
	}
	attrs = append(attrs, slog.Int("requested", len(a.IDs)), slog.Int("not_dead", len(p.NotDead)))
	if a.Scope == "filter" {
		attrs = append(attrs, slog.String("filter", a.Filter.Describe()))
	}
	if p.RetryNow {
		attrs = append(attrs, slog.Bool("pending_made_available_now", true))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", c.secrets.Scrub(err.Error())))
		c.log.Error("console: action failed part way", attrs...)
		return
	}
	c.log.Info("console: action", attrs...)
}
