package dispatcher

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// unavailableAfter reports whether err says the destination is unavailable,
// and the least wait it asked for: an UnavailableError, or, from a
// publisher that did not classify it so, a Retryable or unclassified error
// whose cause is the network refusing or dropping the connection or
// timing out (so a custom publisher gets the breaker without knowing of
// it). A Permanent or Defer error is the publisher's decision and is kept.
func unavailableAfter(err error) (time.Duration, bool) {
	var (
		un   *UnavailableError
		perm *PermanentError
		def  *DeferError
		retr *RetryableError
	)
	switch {
	case errors.As(err, &un):
		return un.After, true
	case errors.As(err, &perm), errors.As(err, &def):
		return 0, false
	case networkDown(err):
		var after time.Duration
		if errors.As(err, &retr) {
			after = retr.After
		}
		return after, true
	}
	return 0, false
}

// networkDown reports a connection refused, reset, aborted or unreachable,
// a failed name lookup, or a network timeout.
func networkDown(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE} {
		if errors.Is(err, e) {
			return true
		}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
