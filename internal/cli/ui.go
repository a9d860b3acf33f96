package cli

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
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
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	if err != nil && strings.TrimSpace(line) == "" {
		// No answer at all: stdin ended (/dev/null, a closed pipe, a job
		// runner's terminal-like device that gives nothing).
		fmt.Fprintln(a.stderr)
		return failf("%s: refusing to %s without confirmation: no answer on stdin (it ended); pass --yes to confirm", f.name, question)
	}
	return failf("%s: not confirmed; nothing changed", f.name)
}

// oldestAge prints the age of the oldest undelivered message: "none" when
// nothing waits (OutboxOldestPendingAge's 0), not an age of 0.
func oldestAge(seconds float64) string {
	if seconds <= 0 {
		return "none"
	}
	return humanAge(seconds)
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

// Every text that comes from the database or from a producer (aggregate
// ids, event types, last_error, error messages echoing them) goes through
// these helpers before it reaches a human-readable output, so that it can
// neither drive the terminal (ESC[2J clears the screen, ESC]0;…BEL sets the
// window title, ESC[8m hides what follows), nor break a table column, nor
// look like another value (bidi overrides reorder what is shown, zero-width
// characters make two ids look alike). --json output is exact JSON instead.

// escape shows s with every character that is not plainly visible escaped
// the way Go writes it: C0 controls (\t, \n, \r, \x1b, …), DEL (\x7f), C1
// controls (\u009b, …), and every other rune unicode.IsPrint rejects except
// the ASCII space (bidi overrides and isolates such as \u202e, zero-width and
// other format characters such as \u200b and \ufeff, non-ASCII spaces, line
// and paragraph separators, private-use and unassigned code points); invalid
// UTF-8 bytes become \xNN. A backslash is doubled, so the escaped form is
// unambiguous: what is shown is exactly the stored value once unescaped.
func escape(s string) string { return escapeText(s, true) }

// escapeText is escape, doubling backslashes only when backslash is set.
func escapeText(s string, backslash bool) string {
	clean := true
	for _, r := range s {
		if (backslash && r == '\\') || r == utf8.RuneError || !visible(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case visible(r):
			b.WriteString(s[i : i+size])
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// visible reports whether r may be printed as itself.
func visible(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f
	}
	return r != utf8.RuneError && unicode.IsPrint(r)
}

// cell formats a value for a table column: escaped (see escape) and
// shortened to at most n runes, ending with "…".
func cell(s string, n int) string { return truncateRunes(escape(s), n) }

// textCell formats free text (last_error) for a table column: runs of ASCII
// whitespace (tabs, newlines, spaces) become one space, then the rest is
// escaped and shortened to at most n runes, like cell.
func textCell(s string, n int) string {
	return truncateRunes(escape(strings.Join(strings.FieldsFunc(s, isASCIISpace), " ")), n)
}

// message escapes a line of text for stderr (an error that may echo stored
// values), keeping the newlines of a message that has several lines. Unlike
// escape it leaves backslashes as they are: the messages are ours and quote
// stored values with %q, and doubling would garble what they say
// ("contains \u0000").
func message(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = escapeText(l, false)
	}
	return strings.Join(lines, "\n")
}

func isASCIISpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
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
