package cli

import (
	"io"
	"net/url"
	"regexp"
	"strings"
	"sync"
)

// redacted replaces passwords and tokens in everything pgoutbox prints.
const redacted = "xxxxx"

// redactDSN hides the password of a PostgreSQL URL (postgres://user:xxxxx@host/db,
// and a password=... query parameter) or keyword/value DSN (password=xxxxx).
func redactDSN(raw string) string {
	lower := strings.ToLower(raw)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return cutUserinfo(raw)
		}
		q := u.Query()
		changed := false
		for k := range q {
			if strings.EqualFold(k, "password") {
				q.Set(k, redacted)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return kvPassword.ReplaceAllString(raw, "${1}"+redacted)
}

// kvPassword matches password=value in a keyword/value DSN; the value may be
// single-quoted with backslash escapes.
var kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// redactURL hides the password (or a lone token) in a broker URL, or a list
// of them separated by commas.
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, raw := range parts {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" {
			parts[i] = cutUserinfo(raw)
			continue
		}
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), redacted)
			} else {
				u.User = url.User(redacted) // token@host
			}
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// cutUserinfo replaces everything before the last '@' of the authority.
func cutUserinfo(raw string) string {
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

// urlSecrets returns the passwords embedded in a URL (or a comma list of
// URLs), raw and percent-decoded. With userIsToken, a user part without a
// password counts as a secret too (NATS reads token@host as a token).
func urlSecrets(list string, userIsToken bool) []string {
	var out []string
	for raw := range strings.SplitSeq(list, ",") {
		rest := strings.TrimSpace(raw)
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
			out = append(out, pass)
		} else if userIsToken {
			out = append(out, userinfo)
		}
	}
	for i, n := 0, len(out); i < n; i++ {
		if d, err := url.PathUnescape(out[i]); err == nil && d != out[i] {
			out = append(out, d)
		}
	}
	return out
}

// scrubber removes known secrets from text. Secrets shorter than 3
// characters are not scrubbed (they would garble everything they appear in).
type scrubber struct {
	mu      sync.Mutex
	secrets []string
}

func (s *scrubber) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range secrets {
		if len(v) >= 3 {
			s.secrets = append(s.secrets, v)
		}
	}
}

func (s *scrubber) scrub(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.secrets {
		text = strings.ReplaceAll(text, v, redacted)
	}
	return text
}

// scrubWriter scrubs secrets from every Write (each log record and each
// message is written in one call).
type scrubWriter struct {
	w io.Writer
	s *scrubber
}

func (w *scrubWriter) Write(p []byte) (int, error) {
	clean := w.s.scrub(string(p))
	if _, err := io.WriteString(w.w, clean); err != nil {
		return 0, err
	}
	return len(p), nil
}
