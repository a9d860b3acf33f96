package dispatcher

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// HorizonHolder is one holder of an old snapshot on the server
// (OutboxHorizonHolders): what keeps vacuum from removing the row versions
// the outbox's claims and finalizes leave behind.
type HorizonHolder struct {
	Kind           string     // backend, standby, replication slot, prepared transaction
	PID            int32      // 0: no process (an inactive slot, a prepared transaction)
	Role           string     // the session's user or the prepared transaction's owner ("" when not visible)
	Name           string     // application_name, slot name or prepared transaction gid
	State          string     // active, idle in transaction, inactive, prepared, ...
	Since          *time.Time // transaction start or prepare time; nil when unknown
	HeldSeconds    float64    // since Since, database clock (0 when unknown)
	XminAge        int64      // age of the xmin it holds, in transactions
	CatalogXminAge int64      // a logical slot's catalog_xmin age (holds back system catalogs only)
	Query          string     // the first 80 characters of its current or last statement
}

// Horizon is what pins the xmin horizon and what the outbox carries because
// of it.
type Horizon struct {
	Holders            []HorizonHolder // oldest first
	DeadTuples         int64           // the outbox table's dead row versions (statistics, approximate)
	LiveTuples         int64
	VacuumedSecondsAgo float64 // since (auto)vacuum last finished on the table; -1: never
}

// Oldest returns the holder of the oldest xmin, and false when none holds
// one.
func (h Horizon) Oldest() (HorizonHolder, bool) {
	if len(h.Holders) == 0 || h.Holders[0].XminAge == 0 {
		return HorizonHolder{}, false
	}
	return h.Holders[0], true
}

// ReadHorizon reads up to maxHolders holders of the oldest snapshots and the
// table's dead tuples.
func ReadHorizon(ctx context.Context, q *db.Queries, maxHolders int) (Horizon, error) {
	rows, err := q.OutboxHorizonHolders(ctx, int32(maxHolders))
	if err != nil {
		return Horizon{}, err
	}
	t, err := q.OutboxDeadTuples(ctx)
	if err != nil {
		return Horizon{}, err
	}
	h := Horizon{DeadTuples: t.DeadTuples, LiveTuples: t.LiveTuples, VacuumedSecondsAgo: t.VacuumedSecondsAgo}
	for _, r := range rows {
		h.Holders = append(h.Holders, HorizonHolder{Kind: r.Kind, PID: r.Pid, Role: r.Role, Name: r.Name, State: r.State,
			Since: r.Since, HeldSeconds: r.HeldSeconds, XminAge: r.XminAge, CatalogXminAge: r.CatalogXminAge, Query: r.Query})
	}
	return h, nil
}
