package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestURL_HidesPasswordsAndTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		nats bool
		want string
	}{
		{"postgres URL", "postgres://app:s3cr3t-pw@db:5432/app?sslmode=disable", false, "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgres URL without a password", "postgres://app@db:5432/app", false, "postgres://app@db:5432/app"},
		{"postgres URL with password parameter", "postgres://app@db/app?password=s3cr3t-pw", false, "postgres://app@db/app?password=xxxxx"},
		{"postgres multi-host URL", "postgres://app:s3cr3t-pw@h1:5432,h2:5432/app", false, "postgres://app:xxxxx@h1:5432,h2:5432/app"},
		{"DSN", "host=db user=app password=s3cr3t-pw dbname=app", false, "host=db user=app password=xxxxx dbname=app"},
		{"DSN with quoted password", `host=db password='it\'s s3cret' dbname=app`, false, "host=db password=xxxxx dbname=app"},
		{"DSN with an at sign", "host=db user=app@corp password=p@ss dbname=app", false, "host=db user=app@corp password=xxxxx dbname=app"},
		{"DSN without a password", "host=db user=app", false, "host=db user=app"},
		{"NATS without credentials", "nats://127.0.0.1:4222", true, "nats://127.0.0.1:4222"},
		{"NATS user and password", "nats://alice:s3cret@h:4222", true, "nats://alice:xxxxx@h:4222"},
		{"NATS token", "nats://t0ken@h:4222", true, "nats://xxxxx@h:4222"},
		{"NATS without a scheme", "alice:s3cret@h:4222", true, "xxxxx@h:4222"},
		{"NATS list", "nats://a:p1@h1:4222, nats://t0ken@h2:1,h3:4222", true, "nats://a:xxxxx@h1:4222,nats://xxxxx@h2:1,h3:4222"},
		{"AMQP percent-encoded password", "amqp://alice:s%2Fcr%40t@h:5672/vhost", false, "amqp://alice:xxxxx@h:5672/vhost"},
		{"AMQP user without a password is kept", "amqp://alice@h:5672/", false, "amqp://alice@h:5672/"},
		{"AMQP password with a comma", "amqp://alice:s3,cret@h:5672/", false, "amqp://alice:xxxxx@h:5672/"},
		{"unparsable URL", "amqp://alice:s3cret@[::1", false, "amqp://xxxxx@[::1"},
		{"unparsable NATS URL", "nats://alice:s3cret@[::1", true, "nats://xxxxx@[::1"},
		{"unparsable URL with password parameter", "postgres://[::1/app?password=s3cret", false, "postgres://[::1/app?password=xxxxx"},
		{"URL without a scheme", "//alice:s3cret@h/x", false, "//xxxxx@h/x"},
		{"short password", "amqp://alice:pw@h:5672/", false, "amqp://alice:xxxxx@h:5672/"},
		{"empty", "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := URL(tc.in, tc.nats); got != tc.want {
				t.Fatalf("URL(%q, %v) = %q; want %q", tc.in, tc.nats, got, tc.want)
			}
		})
	}
}

func TestSecrets_FindsEachFormAsWrittenAndDecoded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		nats bool
		want []string
	}{
		{"postgres URL", "postgres://app:s3cr3t-pw@db:5432/app", false, []string{"s3cr3t-pw"}},
		{"postgres URL with password parameter", "postgres://app@db/app?password=s3cr3t%2Bpw", false, []string{"s3cr3t+pw"}},
		{"DSN", "host=db password=s3cr3t-pw dbname=app", false, []string{"s3cr3t-pw"}},
		{"DSN with quoted password", `host=db password='it\'s s3cret' dbname=app`, false, []string{`it\'s s3cret`, "it's s3cret"}},
		{"NATS user and password", "nats://alice:s3cret@h:4222", true, []string{"s3cret"}},
		{"NATS token", "nats://t0ken@h:4222", true, []string{"t0ken"}},
		{"NATS list", "nats://a:pw-one@h1:4222, t0ken@h2:1", true, []string{"pw-one", "t0ken"}},
		{"user is no token outside NATS", "amqp://alice@h:5672/", false, nil},
		{"AMQP percent-encoded password", "amqp://alice:s%2Fcr%40t@h:5672/", false, []string{"s%2Fcr%40t", "s/cr@t"}},
		{"AMQP password with a comma", "amqp://alice:s3,cret@h:5672/", false, []string{"s3,cret"}},
		{"unparsable URL", "amqp://alice:s3cret@[::1", false, []string{"s3cret"}},
		{"short password", "amqp://alice:pw@h:5672/", false, nil},
		{"short decoded password", "amqp://alice:p%41@h:5672/", false, []string{"p%41"}},
		{"no credentials", "nats://h1:4222,h2:4222", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Secrets(tc.in, tc.nats); !slices.Equal(got, tc.want) {
				t.Fatalf("Secrets(%q, %v) = %q; want %q", tc.in, tc.nats, got, tc.want)
			}
		})
	}
}

func TestError_HidesTheURLAndItsSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		raw  string
		nats bool
		err  string
		want string
	}{
		{"NATS URL and password", "nats://alice:s3cret@h:4222", true,
			`dial "nats://alice:s3cret@h:4222": password s3cret`, `dial "nats://alice:xxxxx@h:4222": password xxxxx`},
		{"NATS list with token", "nats://a:pw@h1:4222,nats://t0ken@h2:1", true,
			"h1: nats://a:pw@h1:4222; h2: auth t0ken", "h1: nats://a:xxxxx@h1:4222; h2: auth xxxxx"},
		{"AMQP percent-encoded password", "amqp://alice:s%2Fcr%40t@h:5672/", false,
			`dial amqp://alice:s%2Fcr%40t@h:5672/: bad password "s/cr@t"`, `dial amqp://alice:xxxxx@h:5672/: bad password "xxxxx"`},
		{"unparsable URL with a short password", "amqp://alice:pw@[::1", false,
			`parse "amqp://alice:pw@[::1": missing ']' in host`, `parse "amqp://xxxxx@[::1": missing ']' in host`},
		{"postgres DSN", "host=db password='s3cret pw'", false,
			"connect: password s3cret pw rejected", "connect: password xxxxx rejected"},
		{"longer secret first", "nats://a:s3cret@h1,nats://b:s3cret-2@h2", true,
			"bad s3cret-2", "bad xxxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cause := errors.New(tc.err)
			got := Error(fmt.Errorf("wrapped: %w", cause), tc.raw, tc.nats)
			if got.Error() != "wrapped: "+tc.want {
				t.Fatalf("Error = %q; want %q", got, "wrapped: "+tc.want)
			}
			if !errors.Is(got, cause) {
				t.Fatalf("Error = %v; want the original error in the chain", got)
			}
		})
	}
}

func TestError_ReturnsErrItselfWhenNothingIsHidden(t *testing.T) {
	t.Parallel()
	err := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}
	if got := Error(err, "amqp://alice:s3cret@h:5672/", false); got != error(err) {
		t.Fatalf("Error = %#v; want err itself", got)
	}
	if got := Error(nil, "amqp://alice:s3cret@h:5672/", false); got != nil {
		t.Fatalf("Error(nil) = %v; want nil", got)
	}
}

func TestScrubber_MasksAddedSecretsOfThreeCharactersOrMore(t *testing.T) {
	t.Parallel()
	var s Scrubber
	s.Add("pw", "s3cret", "s3cret-long", "", "s3cret")
	if got, want := s.Scrub("pw s3cret s3cret-long"), "pw xxxxx xxxxx"; got != want {
		t.Fatalf("Scrub = %q; want %q", got, want)
	}
}

func TestScrubber_WriterScrubsEachWriteAndReportsTheInputLength(t *testing.T) {
	t.Parallel()
	var s Scrubber
	var buf bytes.Buffer
	w := s.Writer(&buf)
	s.Add(Secrets("nats://t0ken@h:4222", true)...)
	in := []byte("auth t0ken failed\n")
	n, err := w.Write(in)
	if err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(in))
	}
	if got, want := buf.String(), "auth xxxxx failed\n"; got != want {
		t.Fatalf("wrote %q; want %q", got, want)
	}
}

func TestScrubber_IsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	var s Scrubber
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s.Add(fmt.Sprintf("s3cret-%d", i))
			if got := s.Scrub(fmt.Sprintf("s3cret-%d", i)); strings.Contains(got, "s3cret") {
				t.Errorf("Scrub = %q; leaks the secret", got)
			}
		})
	}
	wg.Wait()
}
