package webhook

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func TestNew_RejectsInvalidConfigNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       Config
		wantField string
	}{
		{name: "missing URL", cfg: Config{}, wantField: "URL"},
		{name: "relative URL", cfg: Config{URL: "/hooks"}, wantField: "URL"},
		{name: "non-http scheme", cfg: Config{URL: "ftp://example.com/hook"}, wantField: "URL"},
		{name: "no host", cfg: Config{URL: "http:///hook"}, wantField: "URL"},
		{name: "unparsable URL", cfg: Config{URL: "http://exa mple.com/secret-token"}, wantField: "URL"},
		{name: "negative timeout", cfg: Config{URL: "http://example.com", Timeout: -1}, wantField: "Timeout"},
		{name: "defer status 2xx", cfg: Config{URL: "http://example.com", DeferStatus: 204}, wantField: "DeferStatus"},
		{name: "defer status 600", cfg: Config{URL: "http://example.com", DeferStatus: 600}, wantField: "DeferStatus"},
		{name: "reserved static header", cfg: Config{URL: "http://example.com", Headers: map[string]string{"ce-id": "1"}}, wantField: "Headers"},
		{name: "transport static header", cfg: Config{URL: "http://example.com", Headers: map[string]string{"Host": "x"}}, wantField: "Headers"},
		{name: "invalid static header name", cfg: Config{URL: "http://example.com", Headers: map[string]string{"X Bad": "x"}}, wantField: "Headers"},
		{name: "invalid static header value", cfg: Config{URL: "http://example.com", Headers: map[string]string{"Authorization": "Bearer tok\nen"}}, wantField: "Headers"},
		{name: "unavailable status 200", cfg: Config{URL: "http://example.com", UnavailableStatus: []int{503, 200}}, wantField: "UnavailableStatus"},
		{name: "a field under its flag's name", cfg: Config{URL: "ftp://example.com", FieldNames: map[string]string{"URL": "--http-url"}}, wantField: "--http-url must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg)
			if !errors.Is(err, dispatcher.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("err = %v, want it to name %s", err, tt.wantField)
			}
			if strings.Contains(err.Error(), "secret-token") || strings.Contains(err.Error(), "tok\nen") {
				t.Fatalf("err = %v, leaks a URL or header value", err)
			}
		})
	}
}

func TestNew_AppliesDefaults(t *testing.T) {
	t.Parallel()
	p, err := New(Config{URL: "https://example.com/hook"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if p.cfg.Timeout != TimeoutDefault || p.cfg.DeferStatus != DeferStatusDefault {
		t.Fatalf("Timeout = %s, DeferStatus = %d; want %s, %d", p.cfg.Timeout, p.cfg.DeferStatus, TimeoutDefault, DeferStatusDefault)
	}
}
