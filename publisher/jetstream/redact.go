package jetstream

import (
	"net/url"
	"strings"
)

// redacted replaces a password or token in URLs shown in errors and logs.
const redacted = "xxxxx"

// redactURLs redacts every URL of a comma-separated list.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, u := range parts {
		parts[i] = redactURL(strings.TrimSpace(u))
	}
	return strings.Join(parts, ",")
}

// redactURL hides the password of raw (user:password@) or, when there is no
// password, the user part, which NATS reads as a token (token@).
func redactURL(raw string) string {
	if strings.Contains(raw, "://") {
		if u, err := url.Parse(raw); err == nil {
			if u.User == nil {
				return raw
			}
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), redacted)
			} else {
				u.User = url.User(redacted)
			}
			return u.String()
		}
	}
	// Unparsable, or host:port without a scheme: cut the user info by hand.
	rest, scheme := raw, ""
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

// secrets returns the passwords and tokens in a comma-separated URL list,
// as written and percent-decoded.
func secrets(list string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 { // shorter strings would garble the text they appear in
			out = append(out, s)
			if d, err := url.PathUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
		}
	}
	for raw := range strings.SplitSeq(list, ",") {
		raw = strings.TrimSpace(raw)
		rest := raw
		if i := strings.Index(rest, "://"); i >= 0 {
			rest = rest[i+3:]
		}
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		userinfo := rest[:at]
		if _, pass, ok := strings.Cut(userinfo, ":"); ok {
			add(pass)
		} else {
			add(userinfo) // a token
		}
	}
	return out
}

// scrubError returns err with the secrets of urls removed from its text. The
// original error stays in the chain for errors.Is and errors.As.
func scrubError(err error, urls string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			clean = strings.ReplaceAll(clean, u, redactURL(u))
		}
	}
	for _, s := range secrets(urls) {
		clean = strings.ReplaceAll(clean, s, redacted)
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
