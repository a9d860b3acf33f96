package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html static/*
var assets embed.FS

var funcs = template.FuncMap{
	"time":    formatTime,
	"ptime":   formatTimePtr,
	"age":     formatAge,
	"num":     formatInt,
	"str":     func(s *string) string { return deref(s) },
	"seconds": func(s float64) string { return formatAge(time.Duration(s * float64(time.Second))) },
	"oldest":  formatOldest,
	"slice2":  func(a, b chart) []chart { return []chart{a, b} },
	"rate":    func(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) },
	"int64":   func(n int32) int64 { return int64(n) },
	"form": func(base, path string, f filter, statuses []string) filterForm {
		return filterForm{Action: base + path, Filter: f, Statuses: statuses}
	},
}

// filterForm is the data of the filter form template.
type filterForm struct {
	Action   string
	Filter   filter
	Statuses []string
}

// pages are the templates, each the layout plus one page file.
var pages = func() map[string]*template.Template {
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/_*.html"))
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || strings.HasPrefix(name, "_") {
			continue
		}
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(assets, n))
	}
	return out
}()

// view is what the layout needs plus the page's own data.
type view struct {
	Title    string
	Nav      string // overview, messages, dead, blocked
	Base     string // Config.Prefix
	ReadOnly bool
	CSRF     string
	Where    string
	Refresh  int    // seconds between reloads; 0 = none
	Home     string // Config.Home: a link back to a fleet's overview
	Fleet    bool   // the fleet's overview (fleet.go): no per-database navigation
	Data     any
}

// render writes page name with data, buffered so that an error never sends
// half a page, and reports the server time in a Server-Timing header.
func (c *Console) render(w http.ResponseWriter, r *http.Request, start time.Time, status int, name, title, nav string, refresh time.Duration, data any) {
	v := view{Title: title, Nav: nav, Base: c.cfg.Prefix, ReadOnly: c.cfg.ReadOnly, Where: c.where,
		Refresh: int(refresh / time.Second), Home: c.cfg.Home, Data: data}
	if !c.cfg.ReadOnly {
		v.CSRF = c.csrfToken(w, r)
	}
	c.write(w, start, status, name, v)
}

// write renders page name with v, buffered, with the Server-Timing header.
func (c *Console) write(w http.ResponseWriter, start time.Time, status int, name string, v view) {
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.log.Error("console: render", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Server-Timing", fmt.Sprintf("app;dur=%.1f", float64(time.Since(start).Microseconds())/1000))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is what a failed request shows.
type errorPage struct {
	Message string
}

// httpError is an error with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// fail renders an error page: the message of an httpError, or the scrubbed
// database error (logged too).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, start time.Time, err error) {
	status, msg := http.StatusInternalServerError, c.secrets.Scrub(err.Error())
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	} else {
		c.log.Error("console: request failed", slog.String("path", r.URL.Path), slog.String("error", msg))
	}
	c.render(w, r, start, status, "error", http.StatusText(status), "", 0, errorPage{Message: msg})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

// formatOldest prints the age of the oldest undelivered message: "none"
// when nothing waits (the queries' 0), not "0ms" as if one had just arrived.
func formatOldest(seconds float64) string {
	if seconds <= 0 {
		return "none"
	}
	return formatAge(time.Duration(seconds * float64(time.Second)))
}

// formatAge prints a duration to two units: 3d4h, 2h5m, 4m10s, 12s, 350ms.
func formatAge(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d < time.Second:
		return neg + strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return neg + fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return neg + fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return neg + fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return neg + fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// formatInt prints n with thousands separators.
func formatInt(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	default:
		return fmt.Sprint(v)
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
