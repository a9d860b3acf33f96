package console

import (
	"net/http"
	"strconv"
	"time"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
)

// listPage is the keyset state shared by the messages and dead pages.
type listPage struct {
	Filter   filter
	Statuses []string
	Scanned  int64  // index entries the window held when the page was not full
	Next     string // URL of the next (older) page; "" = last page
	First    string // URL of the first page with this filter
	Paged    bool   // this is not the first page
}

type messagesPage struct {
	listPage
	Rows []*consoledb.OutboxConsoleMessagesRow
}

func (c *Console) messages(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	f, err := parseFilter(r, true)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	minID, beforeID, err := c.idRange(ctx, f)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	before, err := parseBefore(r, beforeID)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	p := messagesPage{listPage: listPage{Filter: f, Statuses: statuses, Paged: r.FormValue("before") != ""}}
	if f.Status == "dead" {
		// Dead rows have their own index: page through it, not the primary key.
		rows, window, err := c.deadRows(r, f, minID, before)
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
		for _, d := range rows {
			p.Rows = append(p.Rows, &consoledb.OutboxConsoleMessagesRow{ID: d.ID, AggregateType: d.AggregateType,
				AggregateID: d.AggregateID, EventType: d.EventType, Status: "dead", Attempts: d.Attempts,
				CreatedAt: d.CreatedAt, Ordered: d.Ordered, LastError: d.LastError})
		}
		err = c.setCursor(&p.listPage, c.cfg.Prefix+"/messages", f, len(rows), lastDeadID(rows), window)
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
	} else {
		p.Rows, err = c.cq.OutboxConsoleMessages(ctx, consoledb.OutboxConsoleMessagesParams{
			BeforeID: before, MinID: minID, ScanRows: int32(c.cfg.ScanRows),
			Status: opt(f.Status), EventType: opt(f.EventType), AggregateType: opt(f.AggregateType),
			AggregateID: opt(f.AggregateID), CreatedFrom: f.from, CreatedTo: f.to, PageRows: int32(c.cfg.PageRows)})
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
		var last int64
		if len(p.Rows) > 0 {
			last = p.Rows[len(p.Rows)-1].ID
		}
		err = c.setCursor(&p.listPage, c.cfg.Prefix+"/messages", f, len(p.Rows), last, func() (int64, int64, error) {
			win, err := c.cq.OutboxConsoleScanWindow(ctx, consoledb.OutboxConsoleScanWindowParams{
				BeforeID: before, MinID: minID, ScanRows: int32(c.cfg.ScanRows)})
			return win.LowestID, win.Scanned, err
		})
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
	}
	c.render(w, r, start, http.StatusOK, "messages", "Messages", "messages", 0, p)
}

func (c *Console) setCursor(p *listPage, path string, f filter, rows int, lastID int64, window func() (int64, int64, error)) error {
	v := f.values()
	p.First = path
	if len(v) > 0 {
		p.First += "?" + v.Encode()
	}
	var next int64
	if rows == c.cfg.PageRows {
		next = lastID
	} else {
		lowest, scanned, err := window()
		if err != nil {
			return err
		}
		p.Scanned = scanned
		if scanned >= int64(c.cfg.ScanRows) && lowest > 0 {
			next = lowest
		}
	}
	if next > 0 {
		v.Set("before", strconv.FormatInt(next, 10))
		p.Next = path + "?" + v.Encode()
	}
	return nil
}
