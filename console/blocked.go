package console

import (
	"net/http"
	"time"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
)

type blockedPage struct {
	Rows         []*consoledb.OutboxConsoleBlockedRow
	StalledAfter time.Duration
	Max          int
}

const blockedMax = 100

func (c *Console) blocked(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rows, err := c.cq.OutboxConsoleBlocked(r.Context(), consoledb.OutboxConsoleBlockedParams{
		StalledAfter: c.cfg.StalledAfter, MaxRows: blockedMax})
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	c.render(w, r, start, http.StatusOK, "blocked", "Blocked aggregates", "blocked", 0,
		blockedPage{Rows: rows, StalledAfter: c.cfg.StalledAfter, Max: blockedMax})
}
