package dispatcher

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors callers can test with errors.Is.
var (
	// ErrLeaseLost means a fenced write changed no row: the lease was taken
	// over by another worker (lease_version moved on) or the row was reaped.
	// The message may have been published anyway; the new owner will publish
	// it again and downstream deduplicates by message id.
	ErrLeaseLost = errors.New("outbox: lease lost")
	// ErrInvalidEvent wraps every validation failure of Enqueue.
	ErrInvalidEvent = errors.New("outbox: invalid event")
	// ErrInvalidConfig wraps every validation failure of New.
	ErrInvalidConfig = errors.New("outbox: invalid config")
)

// RetryableError marks a transient failure (timeout, 5xx, 429, connection
// lost): the message goes back to pending after a full-jitter backoff and
// spends an attempt; it goes to dead when attempts are exhausted.
type RetryableError struct {
	Err error
	// After is a minimum delay before the next attempt (an HTTP Retry-After,
	// for example). Zero means the backoff alone decides.
	After time.Duration
}

func (e *RetryableError) Error() string { return "retryable: " + errString(e.Err) }
func (e *RetryableError) Unwrap() error { return e.Err }

// Retryable marks err as a transient failure.
func Retryable(err error) error { return &RetryableError{Err: err} }

// RetryableAfter marks err as transient and asks to wait at least after
// before the next attempt.
func RetryableAfter(err error, after time.Duration) error {
	return &RetryableError{Err: err, After: after}
}

// UnavailableError marks a publish that failed because the destination (the
// receiver, the broker) is unavailable, not because of the message:
// connection refused or reset, a timeout, HTTP 502, 503 or 504, a broker
// that is down or not accepting publishes. While the destination looks down
// (no publish reached it while this one ran), the message is handed
// back with its attempt refunded, and Config.BreakerThreshold of them in a
// row open the breaker, which stops claiming and probes the destination
// with one message at a time until it answers (docs/failures.md). If other
// publishes reached the destination meanwhile, the answer is taken as about
// this message and it is retried as a RetryableError is.
type UnavailableError struct {
	Err error
	// After is a minimum delay before the message, and the next probe, is
	// tried again (an HTTP Retry-After, for example). Zero means no minimum.
	After time.Duration
}

func (e *UnavailableError) Error() string { return "unavailable: " + errString(e.Err) }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable marks err as the destination being unavailable.
func Unavailable(err error) error { return &UnavailableError{Err: err} }

// UnavailableAfter marks err as the destination being unavailable and asks
// to wait at least after before trying it again.
func UnavailableAfter(err error, after time.Duration) error {
	return &UnavailableError{Err: err, After: after}
}

// PermanentError marks a failure that retrying cannot fix (a validation
// error, an unknown destination): the message goes to dead for a person.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + errString(e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a permanent failure.
func Permanent(err error) error { return &PermanentError{Err: err} }

// DeferError is a business defer: the message cannot be delivered yet (a
// resource it depends on does not exist yet). It goes back to pending after
// Delay with its attempt refunded, because a defer is not a failure; once the
// message is older than Config.MaxDeferAge it goes to dead instead.
type DeferError struct {
	Delay  time.Duration
	Reason string
}

func (e *DeferError) Error() string { return fmt.Sprintf("deferred %s: %s", e.Delay, e.Reason) }

// Defer asks to try the message again after delay without spending an attempt.
func Defer(delay time.Duration, reason string) error {
	return &DeferError{Delay: delay, Reason: reason}
}

// Answerer is implemented by a publish error that carries what the
// destination answered: an HTTP status and the start of the response body,
// a broker's reply code. The relay keeps the answer in the message's attempt
// history (outbox_attempts, `pgoutbox dead show`, the console's message
// page) next to the error. Answer should be short (the history keeps 500
// characters) and must not repeat secrets.
type Answerer interface {
	error
	Answer() string
}

// AnswerOf returns the Answer of the first error in err's chain that is an
// Answerer, or "" when none is.
func AnswerOf(err error) string {
	var a Answerer
	if err != nil && errors.As(err, &a) {
		return a.Answer()
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
