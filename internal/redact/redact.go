// Package redact hides passwords and tokens in the URLs, DSNs, errors and
// output that pgoutbox shows.
//
// Two forms of credential-bearing strings exist, and the caller says which
// one it holds:
//
//   - one URL (postgres://, amqp://, https://, ...) or a PostgreSQL
//     keyword/value DSN (host=... password=...). A user without a password
//     is a user name and is kept. Commas belong to the URL (a password may
//     contain one).
//   - a NATS server list (nats is true): URLs separated by commas, in which a
//     user without a password is a token (nats://token@host), so it is
//     hidden too.
package redact

import (
	"cmp"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// mask replaces every hidden password and token.
const mask = "xxxxx"

// minSecret is the shortest secret replaced on its own in free text: a
// shorter one would garble everything it happens to appear in.
const minSecret = 3

// URL returns raw with its passwords hidden: user:xxxxx@ in a URL, a
// password query parameter, password=xxxxx in a keyword/value DSN and, with
// nats, tokens (xxxxx@). An unparsable URL, or one without a host, loses its
// whole user info. raw is returned unchanged when it carries no secret.
func URL(raw string, nats bool) string {
	if !nats {
		return redactOne(raw, false)
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p), true)
	}
	return strings.Join(parts, ",")
}

func redactOne(raw string, token bool) string {
	if isDSN(raw) {
		return kvPassword.ReplaceAllString(raw, "${1}"+mask)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return kvPassword.ReplaceAllString(cutUserinfo(raw), "${1}"+mask)
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User, changed = url.UserPassword(u.User.Username(), mask), true
		} else if token {
			u.User, changed = url.User(mask), true
		}
	}
	if u.RawQuery != "" {
		q, hidden := u.Query(), false
		for k := range q {
			if strings.EqualFold(k, "password") {
				q.Set(k, mask)
				hidden = true
			}
		}
		if hidden {
			u.RawQuery, changed = q.Encode(), true
		}
	}
	if !changed {
		return raw
	}
	return u.String()
}

// Secrets returns the secrets in raw: URL passwords (and, with nats,
// tokens), password query parameters and DSN passwords, each as written and
// decoded (percent-decoding; quotes and backslash escapes of a DSN value).
// Secrets shorter than 3 characters are left out (see Scrubber).
func Secrets(raw string, nats bool) []string {
	var out []string
	add := func(s string) {
		for _, v := range []string{s, percentDecode(s)} {
			if len(v) >= minSecret && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	parts := []string{raw}
	if nats {
		parts = strings.Split(raw, ",")
	}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if isDSN(p) {
			for _, m := range kvPassword.FindAllStringSubmatch(p, -1) {
				v := m[2]
				if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
					v = v[1 : len(v)-1]
				}
				add(v)
				add(unescapeDSN(v))
			}
			continue
		}
		if _, userinfo, _, ok := splitUserinfo(p); ok {
			if _, pass, ok := strings.Cut(userinfo, ":"); ok {
				add(pass)
			} else if nats {
				add(userinfo) // a token
			}
		}
		if u, err := url.Parse(p); err == nil {
			for k, vs := range u.Query() {
				if strings.EqualFold(k, "password") {
					for _, v := range vs {
						add(v)
					}
				}
			}
		}
	}
	return out
}

// Error returns err with the secrets of raw (read as URL and Secrets read
// it) removed from its text: each URL is shown as URL shows it, then every
// secret left is masked. The original error stays in the chain for
// errors.Is and errors.As. Error returns err itself when its text carries
// no secret, and nil for nil.
func Error(err error, raw string, nats bool) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	parts := []string{raw}
	if nats {
		parts = strings.Split(raw, ",")
	}
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			clean = strings.ReplaceAll(clean, p, URL(p, nats))
		}
	}
	clean = replace(clean, longestFirst(Secrets(raw, nats)))
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

// Scrubber masks known secrets in text. The zero value is ready to use and
// safe for concurrent use.
type Scrubber struct {
	mu      sync.Mutex
	secrets []string // longest first, so that no part of a longer one is left
}

// Add makes s mask secrets from now on. Secrets shorter than 3 characters
// are ignored: they would garble everything they appear in.
func (s *Scrubber) Add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range secrets {
		if len(v) >= minSecret && !slices.Contains(s.secrets, v) {
			s.secrets = append(s.secrets, v)
		}
	}
	s.secrets = longestFirst(s.secrets)
}

// Scrub returns text with every secret added so far masked.
func (s *Scrubber) Scrub(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return replace(text, s.secrets)
}

// Writer returns a writer that scrubs each Write before passing it to w.
// A secret split across two writes is not found: write each record or
// message in one call.
func (s *Scrubber) Writer(w io.Writer) io.Writer {
	return &scrubWriter{w: w, s: s}
}

type scrubWriter struct {
	w io.Writer
	s *Scrubber
}

func (w *scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.s.Scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func replace(text string, secrets []string) string {
	for _, v := range secrets {
		text = strings.ReplaceAll(text, v, mask)
	}
	return text
}

func longestFirst(ss []string) []string {
	slices.SortStableFunc(ss, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return ss
}

// kvPassword matches password=value in a keyword/value DSN; the value may be
// single-quoted with backslash escapes.
var kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// dsnStart matches the start of a keyword/value DSN (keyword=).
var dsnStart = regexp.MustCompile(`^\s*[A-Za-z_]\w*\s*=`)

func isDSN(raw string) bool { return dsnStart.MatchString(raw) }

// splitUserinfo finds the user info of raw by hand, so that an unparsable
// URL is covered too: prefix is the scheme and "//" before it, rest what
// follows its '@'. ok is false when raw has no user info.
func splitUserinfo(raw string) (prefix, userinfo, rest string, ok bool) {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	} else if strings.HasPrefix(raw, "//") {
		start = 2
	}
	authority := raw[start:]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return "", "", "", false
	}
	return raw[:start], authority[:at], raw[start+at+1:], true
}

// cutUserinfo replaces the whole user info of raw with the mask.
func cutUserinfo(raw string) string {
	prefix, _, rest, ok := splitUserinfo(raw)
	if !ok {
		return raw
	}
	return prefix + mask + "@" + rest
}

func percentDecode(s string) string {
	if d, err := url.PathUnescape(s); err == nil {
		return d
	}
	return s
}

// unescapeDSN removes the backslash escapes of a DSN value (\' and \\).
func unescapeDSN(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
