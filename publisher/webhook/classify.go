package webhook

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

const (
	// MaxErrorBody is how many bytes of a failed response's body a
	// StatusError keeps.
	MaxErrorBody = 200
	// MaxRetryAfter caps the delay taken from a Retry-After header.
	MaxRetryAfter = 24 * time.Hour
	// maxDrain bounds how much of a response body is read (and discarded)
	// so that the connection can be reused; a larger body closes it.
	maxDrain = 64 << 10
)

// StatusError is a response the receiver answered with a status other than
// 2xx. Publish wraps it in the dispatcher classification (see the package
// documentation); find it with errors.As.
type StatusError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Body is the start of the response body, at most MaxErrorBody bytes,
	// made valid UTF-8.
	Body string
}

func (e *StatusError) Error() string {
	text := http.StatusText(e.StatusCode)
	if text == "" {
		text = "unknown status"
	}
	if e.Body == "" {
		return fmt.Sprintf("webhook: receiver answered %d %s", e.StatusCode, text)
	}
	return fmt.Sprintf("webhook: receiver answered %d %s: %q", e.StatusCode, text, e.Body)
}

// Answer is the receiver's answer for the message's attempt history
// (dispatcher.Answerer): "HTTP 422 Unprocessable Entity", then the start of
// the body if there was one.
func (e *StatusError) Answer() string {
	text := http.StatusText(e.StatusCode)
	if text == "" {
		text = "unknown status"
	}
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d %s", e.StatusCode, text)
	}
	return fmt.Sprintf("HTTP %d %s: %s", e.StatusCode, text, e.Body)
}

var _ dispatcher.Answerer = (*StatusError)(nil)

// classifyResponse maps a response to nil or a classified error, consuming
// and closing its body.
func classifyResponse(resp *http.Response, cfg Config, now time.Time) error {
	snippet := readSnippet(resp.Body, resp.StatusCode/100 != 2)
	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code == cfg.DeferStatus:
		delay, ok := retryAfter(resp.Header, now)
		if !ok || delay <= 0 {
			delay = DeferDelayDefault
		}
		return dispatcher.Defer(delay, (&StatusError{StatusCode: code, Body: snippet}).Error())
	case slices.Contains(cfg.UnavailableStatus, code):
		delay, _ := retryAfter(resp.Header, now)
		return dispatcher.UnavailableAfter(&StatusError{StatusCode: code, Body: snippet}, delay)
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500 && code <= 599:
		delay, _ := retryAfter(resp.Header, now)
		return dispatcher.RetryableAfter(&StatusError{StatusCode: code, Body: snippet}, delay)
	default:
		return dispatcher.Permanent(&StatusError{StatusCode: code, Body: snippet})
	}
}

// readSnippet returns up to MaxErrorBody bytes of body when keep is set,
// drains up to maxDrain bytes so the connection can be reused, and closes it.
func readSnippet(body io.ReadCloser, keep bool) string {
	defer body.Close()
	var snippet string
	if keep {
		buf, _ := io.ReadAll(io.LimitReader(body, MaxErrorBody))
		snippet = strings.TrimSpace(strings.ToValidUTF8(string(buf), string(utf8.RuneError)))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	return snippet
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP-date,
// capped at MaxRetryAfter; a date in the past is zero. ok is false when the
// header is absent or unparsable.
func retryAfter(h http.Header, now time.Time) (delay time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(at.Sub(now), 0), MaxRetryAfter), true
}

// truncate shortens s to at most n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
