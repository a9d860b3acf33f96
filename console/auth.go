package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// authenticate enforces Config.Token or Config.BasicUser/BasicPassword
// (nothing when neither is set). It reports whether the request may go on;
// when not, it has answered 401.
func (c *Console) authenticate(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case c.cfg.Token != "":
		if auth := r.Header.Get("Authorization"); strings.HasPrefix(auth, "Bearer ") {
			if equal(strings.TrimPrefix(auth, "Bearer "), c.cfg.Token) {
				return true
			}
		} else if _, pass, ok := r.BasicAuth(); ok && equal(pass, c.cfg.Token) {
			return true
		}
	case c.cfg.BasicUser != "":
		if user, pass, ok := r.BasicAuth(); ok && equal(user, c.cfg.BasicUser) && equal(pass, c.cfg.BasicPassword) {
			return true
		}
	default:
		return true
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="pgoutbox console", charset="UTF-8"`)
	http.Error(w, "authentication required", http.StatusUnauthorized)
	return false
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// actor names who acted, for the action log: the basic-auth user, and the
// client address.
func actor(r *http.Request) (user, remote string) {
	user, _, _ = r.BasicAuth()
	return user, r.RemoteAddr
}

// CSRF: every browser gets a random cookie (HttpOnly, SameSite=Strict);
// every form carries HMAC(server key, cookie) in a hidden field, which a page
// of another origin can neither read nor compute. A state-changing request
// must carry both, matching, and pass http.CrossOriginProtection
// (Sec-Fetch-Site / Origin). The key is random per Console: a restart
// invalidates open forms, never anything else.
const (
	csrfCookie = "pgoutbox_console_csrf"
	csrfField  = "csrf"
)

// csrfToken returns the form token for this browser, setting its cookie on
// first use.
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) < 16 {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		ck = &http.Cookie{Name: csrfCookie, Value: base64.RawURLEncoding.EncodeToString(b),
			Path: c.cfg.Prefix + "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
		http.SetCookie(w, ck)
	}
	return c.sign(ck.Value)
}

func (c *Console) sign(v string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether a state-changing request is the console's own
// form, submitted from this browser.
func (c *Console) checkCSRF(r *http.Request) bool {
	if err := c.cop.Check(r); err != nil {
		return false
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(c.sign(ck.Value)))
}
