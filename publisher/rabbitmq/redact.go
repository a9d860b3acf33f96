package rabbitmq

import (
	"net/url"
	"strings"
)

// redacted replaces the password in URLs shown in errors and logs.
const redacted = "xxxxx"

// redactURL hides the password of an AMQP URI (user:password@). An
// unparsable URI loses its whole user info.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User == nil {
			return raw
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		return u.String()
	}
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	at := strings.LastIndex(host, "@")
	if at < 0 {
		return raw
	}
	return scheme + redacted + "@" + rest[at+1:]
}

// password returns the password of raw as written, found by hand so that an
// unparsable URI is covered too.
func password(raw string) string {
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pass, _ := strings.Cut(rest[:at], ":")
	return pass
}

// scrubError returns err with the URI and its password removed from its
// text. The original error stays in the chain for errors.Is and errors.As.
func scrubError(err error, uri string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := strings.ReplaceAll(msg, uri, redactURL(uri))
	if pass := password(uri); len(pass) >= 3 { // shorter would garble the text
		clean = strings.ReplaceAll(clean, pass, redacted)
		if d, err := url.PathUnescape(pass); err == nil && d != pass {
			clean = strings.ReplaceAll(clean, d, redacted)
		}
	}
	if clean == msg {
		return err
	}
	return &scrubbedError{msg: clean, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
