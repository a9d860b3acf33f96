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
	table    *string     // --table, on every command that opens the database
	schema   *string     // --schema
	fleet    *fleetFlags // the multi-database forms (fleet.go), on the commands that have them
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

// usageError is a bad-usage exit (2) that prints the command's help after
// the message.
func (f *flags) usageError(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: f.name + ": " + fmt.Sprintf(format, args...), usage: f.usage}
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
	msg = strings.Replace(msg, "flag provided but not defined: -", "unknown flag: -", 1)
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

// listValue is a repeatable string flag.
type listValue struct{ list *[]string }

func (f *flags) list(name, usage string) *[]string {
	var l []string
	f.Var(&listValue{list: &l}, name, usage)
	return &l
}

func (v *listValue) String() string {
	if v == nil || v.list == nil {
		return ""
	}
	return strings.Join(*v.list, ",")
}

func (v *listValue) typeName() string { return "key=value" }

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
	f.tableFlags()
	return s
}

// tableFlags adds --table and --schema.
func (f *flags) tableFlags() {
	f.table = f.String("table", dispatcher.TableDefault, "the outbox table (one created by pgoutbox init --table NAME)")
	f.schema = f.String("schema", "", "the schema of --table (default: none, resolved through the search_path)")
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
