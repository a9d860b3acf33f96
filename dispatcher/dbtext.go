package dispatcher

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Limits of the texts the dispatcher writes, in characters: what the SQL
// keeps (left(@error, 500)) and a generous bound on lease_owner.
const (
	maxErrorChars = 500
	maxOwnerChars = 200
)

// dbText makes s a text PostgreSQL accepts and keeps: valid UTF-8 (invalid
// bytes become U+FFFD, so a Latin-1 error page from a webhook is still
// readable), no NUL (text cannot hold it), at most maxChars characters, cut
// on a character boundary. Every text the dispatcher writes goes through it:
// a text the server refuses (22021) would make the fenced write fail for
// ever.
func dbText(s string, maxChars int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if utf8.RuneCountInString(s) <= maxChars {
		return s
	}
	n := 0
	for i := range s {
		if n == maxChars {
			return s[:i]
		}
		n++
	}
	return s
}

// errText is dbText for last_error.
func errText(s string) string { return dbText(s, maxErrorChars) }

// sqlState returns the SQLSTATE of a server error, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// isDataError reports a database data exception (SQLSTATE class 22): the
// statement's input is at fault, and sending it again fails again.
func isDataError(err error) bool { return strings.HasPrefix(sqlState(err), "22") }

// isRowError reports an error that one row's content can cause when it is
// read: data exceptions (class 22), program limits (class 54: a jsonb whose
// text form exceeds 1 GB fails with 54000) and out of memory (53200). Such an
// error is not a connection or server-availability problem, so retrying the
// same statement does not help; the isolation path finds the row.
func isRowError(err error) bool {
	switch code := sqlState(err); {
	case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "54"), code == "53200":
		return true
	}
	return false
}

// isTimeout reports an error caused by our own per-operation deadline (the
// context timed out, or the server cancelled the statement for it) while
// parent is still live.
func isTimeout(parent context.Context, err error) bool {
	if parent.Err() != nil {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || sqlState(err) == "57014"
}
