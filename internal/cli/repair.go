package cli

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func (a *app) repair(ctx context.Context, args []string) error {
	f := newFlags("repair", "pgoutbox repair [flags]",
		"Repairs at once what rows brought from another server leave behind, as a running relay\n"+
			"does by itself: pending messages whose txid this server has not assigned (restored with\n"+
			"pg_restore, or copied by logical replication, from a server further on) are re-stamped so\n"+
			"that relays claim them; ordered messages inserted with the table's triggers off (a logical\n"+
			"replication apply, pg_restore --disable-triggers) are sequenced in id order; the id and seq\n"+
			"sequences are moved past the rows (logical replication does not copy sequences); ordered\n"+
			"messages committed and not decided yet get their heads, and missing heads are flagged. Run it on the new server after a\n"+
			"restore or a logical replication cutover, before producers write to it. Safe at any time;\n"+
			"run again, it finds nothing.",
		"  pgoutbox repair\n"+
			"  pgoutbox repair --schema billing")
	dbURL := f.databaseURL()
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := dispatcher.Repair(ctx, pool, a.table, a.schema)
	if err != nil {
		return a.dbError("repair", err)
	}
	if rep.NothingRepaired {
		fmt.Fprintln(a.stdout, "nothing to repair")
		return nil
	}
	for _, l := range []struct {
		n    int64
		what string
	}{
		{rep.Restamped, "pending messages re-stamped with a txid of this server"},
		{rep.Sequenced, "ordered messages sequenced (inserted with triggers off)"},
		{rep.SequencesMoved, "sequences moved past the rows"},
		{rep.HeadsDecided, "ordered events decided"},
		{rep.HeadsFlagged, "aggregates given their missing head"},
	} {
		if l.n > 0 {
			fmt.Fprintf(a.stdout, "%d %s\n", l.n, l.what)
		}
	}
	return nil
}
