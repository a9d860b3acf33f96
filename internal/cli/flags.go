package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// flags is one command's FlagSet and its help text.
type flags struct {
	*flag.FlagSet
	name     string // "dead retry"
	synopsis string // "pgoutbox dead retry [flags] ID..."
	about    string // what it does
	examples string // indented example lines
	hidden   map[string]bool
	table    *string // --table, on every command that opens the database
	schema   *string // --schema
}

func newFlags(name, synopsis, about, examples string) *flags {
	fs := flag.NewFlagSet("pgoutbox "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by us
	fs.Usage = func() {}
	return &flags{FlagSet: fs, name: name, synopsis: synopsis, about: about, examples: examples, hidden: map[string]bool{}}
}

// flagGroups are the prefixes whose flags are listed in a section of their
// own (the publisher flags of run).
var flagGroups = []struct{ prefix, title string }{
	{"http-", "--publisher http"},
	{"nats-", "--publisher nats"},
	{"amqp-", "--publisher amqp"},
	{"kafka-", "--publisher kafka"},
	{"stdout-", "--publisher stdout"},
}

// usage writes the command's help: synopsis, description, flags, examples.
func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", f.synopsis, strings.TrimRight(f.about, "\n"))
	sections := make([]strings.Builder, len(flagGroups)+1)
	f.VisitAll(func(fl *flag.Flag) {
		b := &sections[0]
		for i, g := range flagGroups {
			if strings.HasPrefix(fl.Name, g.prefix) {
				b = &sections[i+1]
			}
		}
		typ, usage := flag.UnquoteUsage(fl)
		if v, ok := fl.Value.(interface{ typeName() string }); ok {
			typ = v.typeName()
		}
		fmt.Fprintf(b, "  --%s", fl.Name)
		if typ != "" {
			fmt.Fprintf(b, " %s", typ)
		}
		fmt.Fprintf(b, "\n      %s", strings.ReplaceAll(usage, "\n", "\n      "))
		switch fl.DefValue {
		case "", "0", "0s", "false", "[]":
		default:
			if !f.hidden[fl.Name] {
				fmt.Fprintf(b, " (default %s)", fl.DefValue)
			}
		}
		b.WriteString("\n")
	})
	if sections[0].Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", sections[0].String())
	}
	for i, g := range flagGroups {
		if sections[i+1].Len() > 0 {
			fmt.Fprintf(w, "\nFlags for %s:\n%s", g.title, sections[i+1].String())
		}
	}
	if f.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(f.examples, "\n"))
	}
}

// usageError is a bad-usage exit (2): the message and where the help is,
// a few lines at most (the whole help would bury the one line that matters).
func (f *flags) usageError(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: f.name + ": " + fmt.Sprintf(format, args...) + "\n" + f.seeHelp()}
}

// seeHelp is the line that closes every usage error of the command.
func (f *flags) seeHelp() string {
	return "See 'pgoutbox " + f.name + " --help'."
}

// unknownFlag is the usage error for a flag the command does not define:
// the flag as typed (two dashes or one, with its =value cut off) and the
// closest flag the command has, when one is close.
func (f *flags) unknownFlag(name string, args []string) error {
	typed := "--" + name
	for _, a := range args {
		if a == "--" {
			break
		}
		if n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); n == name && strings.HasPrefix(a, "-") {
			typed, _, _ = strings.Cut(a, "=")
			break
		}
	}
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	if best := closest(name, names); best != "" {
		return f.usageError("unknown flag %s (did you mean --%s?)", typed, best)
	}
	return f.usageError("unknown flag %s", typed)
}

// closest returns the candidate nearest to s by edit distance (at most a
// third of s's length, and at most 3), or "" when none is that close. A
// candidate that s abbreviates counts as close too.
func closest(s string, candidates []string) string {
	best, bestD := "", min(3, max(1, len(s)/3))+1
	for _, c := range candidates {
		d := editDistance(s, c)
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment) of a and b: "bacth" is one transposition from "batch".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

var negativeNumber = regexp.MustCompile(`^-[0-9]+$`)

// parse parses args, allowing flags after positional arguments ("dead retry
// 1 2 --yes"); "--" ends the flags. -h/--help prints the usage to stdout and
// returns errHelp. maxPositional < 0 allows any number.
func (a *app) parse(f *flags, args []string, maxPositional int) ([]string, error) {
	var positional []string
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.usage(a.stdout)
			return nil, errHelp
		}
		if err != nil {
			// A negative number is an argument, not a flag: report it as
			// such ("-5" is not a valid id) instead of "flag not defined".
			if len(args) > 0 {
				if i := indexNegative(args); i >= 0 && strings.Contains(err.Error(), "flag provided but not defined: "+args[i]) {
					positional = append(positional, args[i])
					args = append(append([]string{}, args[:i]...), args[i+1:]...)
					continue
				}
			}
			if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
				return nil, f.unknownFlag(name, args)
			}
			return nil, f.usageError("%s", cleanFlagError(err))
		}
		rest := f.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	if f.table != nil {
		if _, err := sqlrename.New(*f.table, *f.schema); err != nil {
			return nil, f.usageError("%v", err)
		}
		a.table, a.schema = *f.table, *f.schema
	}
	if maxPositional >= 0 && len(positional) > maxPositional {
		if maxPositional == 0 {
			return nil, f.usageError("unexpected argument %q (this command takes flags only)", positional[0])
		}
		return nil, f.usageError("too many arguments: %q", positional[maxPositional:])
	}
	return positional, nil
}

func indexNegative(args []string) int {
	for i, s := range args {
		if s == "--" {
			return -1
		}
		if negativeNumber.MatchString(s) {
			return i
		}
	}
	return -1
}

// cleanFlagError rewrites the flag package's "-name" to "--name".
func cleanFlagError(err error) string {
	msg := err.Error()
	msg = strings.Replace(msg, "for flag -", "for flag --", 1)
	msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
	return msg
}

// visited reports whether the flag was set on the command line.
func (f *flags) visited(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			set = true
		}
	})
	return set
}

// durationValue is a Go duration flag with a clear error message, optionally
// accepting a "d" (days) suffix.
type durationValue struct {
	d    *time.Duration
	days bool
}

func (f *flags) duration(name string, def time.Duration, usage string) *time.Duration {
	d := def
	f.Var(&durationValue{d: &d}, name, usage)
	return &d
}

// durationDays is duration that also accepts days: 7d, 1d12h.
func (f *flags) durationDays(name string, def time.Duration, usage string) *time.Duration {
	d := def
	f.Var(&durationValue{d: &d, days: true}, name, usage)
	return &d
}

func (v *durationValue) String() string {
	if v == nil || v.d == nil {
		return ""
	}
	return formatFlagDuration(*v.d)
}

func (v *durationValue) typeName() string { return "duration" }

func (v *durationValue) Set(s string) error {
	var d time.Duration
	var err error
	if v.days {
		d, err = parseDays(s)
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		if v.days {
			return fmt.Errorf("expected a duration with a unit, such as 36h, 7d or 1d12h (units: ms, s, m, h, d)")
		}
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return fmt.Errorf("missing unit: expected a Go duration such as 200ms, 3s or 1m")
		}
		return fmt.Errorf("expected a Go duration such as 200ms, 3s or 1m")
	}
	*v.d = d
	return nil
}

var daysRe = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// parseDays parses a Go duration with an optional leading whole number of
// days: 7d, 1d12h, 36h.
func parseDays(s string) (time.Duration, error) {
	m := daysRe.FindStringSubmatch(s)
	if m == nil {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || days > math.MaxInt64/int64(24*time.Hour) {
		return 0, fmt.Errorf("days out of range")
	}
	d := time.Duration(days) * 24 * time.Hour
	if m[2] != "" {
		rest, err := time.ParseDuration(m[2])
		if err != nil {
			return 0, err
		}
		if rest < 0 {
			return 0, fmt.Errorf("negative part after days")
		}
		d += rest
	}
	return d, nil
}

// formatFlagDuration prints whole days as "7d", everything else as Go does.
func formatFlagDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// intValue is an integer flag with a clear error message.
type intValue struct{ n *int64 }

func (f *flags) int64(name string, def int64, usage string) *int64 {
	n := def
	f.Var(&intValue{n: &n}, name, usage)
	return &n
}

func (v *intValue) String() string {
	if v == nil || v.n == nil {
		return ""
	}
	return strconv.FormatInt(*v.n, 10)
}

func (v *intValue) typeName() string { return "int" }

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("expected a whole number")
	}
	*v.n = n
	return nil
}

// listValue is a repeatable string flag; typ names its values in the help
// (key=value unless set).
type listValue struct {
	list *[]string
	typ  string
}

func (f *flags) list(name, usage string) *[]string {
	return f.listOf(name, "key=value", usage)
}

// listOf is list with typ naming the values in the help ("host").
func (f *flags) listOf(name, typ, usage string) *[]string {
	var l []string
	f.Var(&listValue{list: &l, typ: typ}, name, usage)
	return &l
}

func (v *listValue) String() string {
	if v == nil || v.list == nil {
		return ""
	}
	return strings.Join(*v.list, ",")
}

func (v *listValue) typeName() string { return v.typ }

func (v *listValue) Set(s string) error {
	*v.list = append(*v.list, s)
	return nil
}

// databaseURL adds --database-url (its value is never shown as a default),
// and --table and --schema: every command that opens the database works on
// a table created by `pgoutbox init --table NAME --schema SCHEMA`.
func (f *flags) databaseURL() *string {
	s := f.String("database-url", "", "PostgreSQL URL or keyword/value DSN (default: $DATABASE_URL)")
	f.hidden["database-url"] = true
	f.table = f.String("table", dispatcher.TableDefault, "the outbox table (one created by pgoutbox init --table NAME)")
	f.schema = f.String("schema", "", "the schema of --table (default: none, resolved through the search_path)")
	return s
}

// checkRange returns a usage error unless lo <= n <= hi.
func (f *flags) checkRange(name string, n, lo, hi int64) error {
	if n < lo || n > hi {
		if hi == math.MaxInt64 || hi == math.MaxInt32 {
			return f.usageError("--%s must be at least %d, got %d", name, lo, n)
		}
		return f.usageError("--%s must be between %d and %d, got %d", name, lo, hi, n)
	}
	return nil
}

// checkPositive returns a usage error unless d > 0.
func (f *flags) checkPositive(name string, d time.Duration) error {
	if d <= 0 {
		return f.usageError("--%s must be a positive duration (such as 200ms, 3s, 1m), got %s", name, d)
	}
	return nil
}
