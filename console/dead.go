package console

import (
	"net/http"
	"time"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
)

type deadPage struct {
	listPage
	Rows   []*consoledb.OutboxConsoleDeadRow
	Values map[string]string // the filter as hidden fields of the action form
}

func (c *Console) dead(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	f, err := parseFilter(r, false)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	minID, beforeID, err := c.idRange(r.Context(), f)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	before, err := parseBefore(r, beforeID)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	p := deadPage{listPage: listPage{Filter: f, Paged: r.FormValue("before") != ""}, Values: map[string]string{}}
	rows, window, err := c.deadRows(r, f, minID, before)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	p.Rows = rows
	if err := c.setCursor(&p.listPage, c.cfg.Prefix+"/dead", f, len(rows), lastDeadID(rows), window); err != nil {
		c.fail(w, r, start, err)
		return
	}
	for k, v := range f.values() {
		p.Values[k] = v[0]
	}
	c.render(w, r, start, http.StatusOK, "dead", "Dead letters", "dead", 0, p)
}

// deadRows reads one page of dead messages through outbox_dead, and returns
// the window function that says where its scan ended.
func (c *Console) deadRows(r *http.Request, f filter, minID, before int64) ([]*consoledb.OutboxConsoleDeadRow, func() (int64, int64, error), error) {
	ctx := r.Context()
	rows, err := c.cq.OutboxConsoleDead(ctx, consoledb.OutboxConsoleDeadParams{
		BeforeID: before, MinID: minID, ScanRows: int32(c.cfg.ScanRows),
		EventType: opt(f.EventType), AggregateType: opt(f.AggregateType), AggregateID: opt(f.AggregateID),
		CreatedFrom: f.from, CreatedTo: f.to, PageRows: int32(c.cfg.PageRows)})
	window := func() (int64, int64, error) {
		win, err := c.cq.OutboxConsoleDeadWindow(ctx, consoledb.OutboxConsoleDeadWindowParams{
			BeforeID: before, MinID: minID, ScanRows: int32(c.cfg.ScanRows)})
		return win.LowestID, win.Scanned, err
	}
	return rows, window, err
}

func lastDeadID(rows []*consoledb.OutboxConsoleDeadRow) int64 {
	if len(rows) == 0 {
		return 0
	}
	return rows[len(rows)-1].ID
}
