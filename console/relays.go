package console

import (
	"net/http"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// relaysPage is the relays page: one row per relay process, as each relay
// records itself in outbox_relays (dispatcher.ReadRelays), not derived from
// the claims.
type relaysPage struct {
	Relays      []dispatcher.Relay
	Max         int
	SilentAfter time.Duration
}

const relaysMax = 100

func (c *Console) relays(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rows, err := dispatcher.ReadRelays(r.Context(), c.q, relaysMax)
	if err != nil {
		c.fail(w, r, start, err)
		return
	}
	c.render(w, r, start, http.StatusOK, "relays", "Relays", "relays", c.cfg.Refresh,
		relaysPage{Relays: rows, Max: relaysMax, SilentAfter: dispatcher.RelaySilentAfter})
}
