package webhook

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Defaults for Config.
const (
	// TimeoutDefault bounds one request, headers and body included.
	TimeoutDefault = 10 * time.Second
	// DeferStatusDefault is 425 Too Early: "this resource is not ready yet".
	DeferStatusDefault = http.StatusTooEarly
	// DeferDelayDefault is the defer delay when the receiver sends no usable
	// Retry-After with Config.DeferStatus.
	DeferDelayDefault = time.Minute
)

// UnavailableStatusDefault are the statuses with which a receiver says it
// is unavailable, not that the message is wrong: 408 Request Timeout, 429
// Too Many Requests, 502 Bad Gateway, 503 Service Unavailable and 504
// Gateway Timeout.
var UnavailableStatusDefault = []int{http.StatusRequestTimeout, http.StatusTooManyRequests,
	http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// Config configures a Publisher.
type Config struct {
	// URL receives every message as a POST. It must be an absolute http or
	// https URL with a host. Required.
	URL string
	// Secret, when set, signs every request the Standard Webhooks way
	// (webhook-id, webhook-timestamp, webhook-signature; see Verify): either
	// "whsec_" + base64 of the key bytes, as Standard Webhooks secrets are
	// written, or any other string, used as raw key bytes. It never appears
	// in errors or logs. Defaults to "" (unsigned).
	Secret string
	// PreviousSecrets are signed with too, while a secret is rotated: every
	// request then carries one signature per secret, and receivers accept
	// either until they have all switched to Secret. Requires Secret.
	// Defaults to none.
	PreviousSecrets []string
	// Source is the ce-source attribute, and with the outbox id the
	// idempotency key (webhook-id, Idempotency-Key). Defaults to "":
	// Message.Source, the per-outbox source the dispatcher sets.
	Source string
	// Timeout bounds one request, from dialing to the end of the response
	// headers and the bounded read of its body; the dispatcher's ctx deadline
	// applies as well, whichever ends first. Defaults to 10s (TimeoutDefault).
	Timeout time.Duration
	// Client sends the requests. The Publisher uses a shallow copy whose
	// CheckRedirect refuses to follow redirects; Client.Timeout is left as
	// is. Defaults to a client with its own transport (cloned from
	// http.DefaultTransport: proxy from the environment, HTTP/2, 10s TLS
	// handshake, 64 idle connections per host), which Close releases.
	Client *http.Client
	// DeferStatus is the status with which a receiver says "not yet" (a
	// resource the event depends on does not exist yet): the message is
	// deferred, not failed. It must be within 400-599 and takes precedence
	// over the other rules for that status. Defaults to 425 (Too Early).
	DeferStatus int
	// UnavailableStatus are the statuses with which the receiver says it is
	// unavailable rather than refusing the message: Publish returns a
	// dispatcher.UnavailableError for them (Retry-After as the least wait),
	// which costs the message no attempt while the receiver is down and
	// opens the dispatcher's breaker (docs/failures.md). Each must be within
	// 400-599; DeferStatus takes precedence. Empty (not nil): none. Defaults to
	// UnavailableStatusDefault (408, 429, 502, 503, 504).
	UnavailableStatus []int
	// Headers are static headers added to every request (an Authorization
	// header, for example). Their values never appear in errors. They win over
	// Message.Headers; a reserved name (see ReservedHeaders) is a config
	// error. Defaults to none.
	Headers map[string]string
	// FieldNames names this Config's fields in error messages, for a
	// program whose users set them under other names (the pgoutbox CLI maps
	// "URL" to "--http-url"). A field not in the map is named as in Go.
	// Defaults to none.
	FieldNames map[string]string
}

func (c Config) withDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.DeferStatus = cmp.Or(c.DeferStatus, DeferStatusDefault)
	if c.UnavailableStatus == nil {
		c.UnavailableStatus = UnavailableStatusDefault
	}
	return c
}

// name is how errors name field (FieldNames).
func (c Config) name(field string) string { return cmp.Or(c.FieldNames[field], field) }

// validate checks c (with defaults applied) and returns the parsed URL.
func (c Config) validate() (*url.URL, error) {
	if c.URL == "" {
		return nil, invalid("%s is required", c.name("URL"))
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// url.Error would repeat the URL, which may embed a token.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, invalid("%s does not parse: %v", c.name("URL"), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalid("%s must be an absolute http or https URL, got scheme %q", c.name("URL"), u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, invalid("%s has no host", c.name("URL"))
	}
	if len(c.PreviousSecrets) > 0 && c.Secret == "" {
		return nil, invalid("%s requires %s", c.name("PreviousSecrets"), c.name("Secret"))
	}
	if c.Timeout < 0 {
		return nil, invalid("%s must not be negative, got %s", c.name("Timeout"), c.Timeout)
	}
	if c.DeferStatus < 400 || c.DeferStatus > 599 {
		return nil, invalid("%s must be within 400-599, got %d", c.name("DeferStatus"), c.DeferStatus)
	}
	for _, code := range c.UnavailableStatus {
		if code < 400 || code > 599 {
			return nil, invalid("%s must be within 400-599, got %d", c.name("UnavailableStatus"), code)
		}
	}
	for name, value := range c.Headers {
		if !validHeaderName(name) {
			return nil, invalid("%s: %q is not a valid header name", c.name("Headers"), name)
		}
		if isReserved(name) || isTransportHeader(name) {
			return nil, invalid("%s: %q is reserved and set by the publisher", c.name("Headers"), name)
		}
		if !validHeaderValue(value) {
			return nil, invalid("%s: the value of %q is not a valid header value", c.name("Headers"), name)
		}
	}
	return u, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: webhook: %s", dispatcher.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
