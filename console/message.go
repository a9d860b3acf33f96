package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

type messagePage struct {
	M         *consoledb.OutboxConsoleMessageRow
	Payload   string // pretty-printed JSON, rendered as text
	Headers   string
	Now       time.Time
	CanRetry  bool // dead, or pending in backoff
	CanSkip   bool // dead
	InBackoff bool
	// CanRedeliver: done and unordered (a done ordered message is not
	// delivered again: its aggregate moved on; OrderedDone says so).
	CanRedeliver bool
	OrderedDone  bool
	// History is the attempt history, newest first: the failures of the
	// message's last 20 claims and its last 5 redeliveries.
	History []*opsdb.OutboxAttemptHistoryRow
}

func (c *Console) message(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	m, err := c.cq.OutboxConsoleMessage(r.Context(), id)
	if errors.Is(err, pgx.ErrNoRows) {
		c.fail(w, r, start, &httpError{status: http.StatusNotFound, msg: "no message with this id (never existed, or purged)"})
		return
	}
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	now, err := c.cq.OutboxConsoleNow(r.Context())
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	history, err := c.oq.OutboxAttemptHistory(r.Context(), id)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	p := messagePage{M: m, Payload: pretty(m.Payload), Headers: pretty(m.Headers), Now: now, History: history}
	p.CanRedeliver = m.Status == "done" && !m.Ordered
	p.OrderedDone = m.Status == "done" && m.Ordered
	p.InBackoff = m.Status == "pending" && m.AvailableAt.After(now)
	p.CanRetry = m.Status == "dead" || p.InBackoff
	p.CanSkip = m.Status == "dead"
	c.render(w, r, start, http.StatusOK, "message", "Message "+strconv.FormatInt(m.ID, 10), "messages", 0, p)
}

// pretty indents JSON (jsonb text from PostgreSQL); anything else as is.
func pretty(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}
