package dispatcher

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestDefaultSource_DiffersBetweenOutboxesAndNamesTheDatabaseAndTable(t *testing.T) {
	t.Parallel()
	parse := func(s string) *pgconn.Config {
		t.Helper()
		c, err := pgconn.ParseConfig(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name, conn, schema, table, want string
	}{
		{"host, port, database, table", "postgres://u:secret@db.internal:5433/app", "public", "outbox",
			"pgoutbox://db.internal:5433/app/public.outbox"},
		{"another database", "postgres://u@db.internal:5433/billing", "public", "outbox",
			"pgoutbox://db.internal:5433/billing/public.outbox"},
		{"another table", "postgres://u@db.internal:5433/app", "public", "billing_outbox",
			"pgoutbox://db.internal:5433/app/public.billing_outbox"},
		{"no schema", "postgres://u@db.internal:5433/app", "", "outbox",
			"pgoutbox://db.internal:5433/app/outbox"},
		{"IPv6", "postgres://u@[::1]:5432/app", "public", "outbox",
			"pgoutbox://[::1]:5432/app/public.outbox"},
		{"unix socket and fallback hosts, TLS variants once", "host=/run/postgresql,db2 port=5432 dbname=app user=u sslmode=prefer", "public", "outbox",
			"pgoutbox://%2Frun%2Fpostgresql:5432,db2:5432/app/public.outbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := DefaultSource(parse(tt.conn), tt.schema, tt.table); got != tt.want {
				t.Fatalf("DefaultSource = %q, want %q", got, tt.want)
			}
		})
	}
}
