// Package testutil holds the application's hand-written test doubles.
package testutil

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MockDBTX is a hand-written store.DBTX: it records the SQL it is given and
// answers QueryRow from Row. It has exactly the methods sqlc's DBTX has for
// queries without :copyfrom.
type MockDBTX struct {
	SQL []string
	Row func(dest ...any) error
}

func (m *MockDBTX) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	m.SQL = append(m.SQL, sql)
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}

func (m *MockDBTX) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	m.SQL = append(m.SQL, sql)
	return nil, errors.New("MockDBTX: Query not scripted")
}

func (m *MockDBTX) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	m.SQL = append(m.SQL, sql)
	return row{m.Row}
}

type row struct{ scan func(dest ...any) error }

func (r row) Scan(dest ...any) error {
	if r.scan == nil {
		return pgx.ErrNoRows
	}
	return r.scan(dest...)
}
