package store_test

import (
	"context"
	"strings"
	"testing"

	"example.com/adopt/internal/testutil"
	"example.com/adopt/store"
)

var _ store.DBTX = (*testutil.MockDBTX)(nil)

func TestPayslipCreateThroughTheMock(t *testing.T) {
	m := &testutil.MockDBTX{Row: func(dest ...any) error {
		*dest[0].(*int64) = 7
		return nil
	}}
	id, err := store.New(m).PayslipCreate(context.Background(), store.PayslipCreateParams{EmployeeID: 1, Period: "2026-11", AmountCents: 420000})
	if err != nil || id != 7 {
		t.Fatalf("PayslipCreate = %d, %v", id, err)
	}
	if len(m.SQL) != 1 || !strings.Contains(m.SQL[0], "INSERT INTO hr.payslips") {
		t.Errorf("SQL seen: %q", m.SQL)
	}
}
