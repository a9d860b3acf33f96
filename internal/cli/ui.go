package cli

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// confirm asks "<question>? [y/N]" on stderr and reads the answer from
// stdin. Without a terminal on stdin it refuses (the caller's --yes skips
// confirm altogether).
func (a *app) confirm(f *flags, question string) error {
	if !a.stdinIsTerminal() {
		return failf("%s: refusing to %s without confirmation: stdin is not a terminal; pass --yes to confirm", f.name, question)
	}
	fmt.Fprintf(a.stderr, "%s? [y/N] ", question)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return failf("%s: not confirmed; nothing changed", f.name)
}

// humanAge formats seconds as a short duration: 0s, 45s, 3m12s, 2h05m, 3d04h.
func humanAge(seconds float64) string {
	if math.IsNaN(seconds) || seconds <= 0 {
		return "0s"
	}
	if seconds < 1 {
		return strconv.FormatInt(int64(seconds*1000), 10) + "ms"
	}
	s := int64(seconds)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// truncate shortens s to at most n runes on one line, ending with "…".
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// tabSafe keeps a value from breaking a tabwriter column.
func tabSafe(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

func formatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// idList formats at most limit ids, then "and N more".
func idList(ids []int64, limit int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == limit {
			fmt.Fprintf(&b, " and %d more", len(ids)-limit)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}
