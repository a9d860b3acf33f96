package webhook

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter_ParsesSecondsAndHTTPDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{name: "absent", value: "", want: 0, wantOK: false},
		{name: "seconds", value: "7", want: 7 * time.Second, wantOK: true},
		{name: "zero seconds", value: "0", want: 0, wantOK: true},
		{name: "negative seconds", value: "-3", want: 0, wantOK: false},
		{name: "huge seconds are capped", value: "99999999999999", want: MaxRetryAfter, wantOK: true},
		{name: "HTTP-date in the future", value: now.Add(2 * time.Minute).Format(http.TimeFormat), want: 2 * time.Minute, wantOK: true},
		{name: "HTTP-date in the past", value: now.Add(-time.Hour).Format(http.TimeFormat), want: 0, wantOK: true},
		{name: "garbage", value: "later", want: 0, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.value != "" {
				h.Set("Retry-After", tt.value)
			}
			got, ok := retryAfter(h, now)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("retryAfter(%q) = %s, %v; want %s, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestEncodeCEValue_PercentEncodesOnlyWhatTheBindingRequires(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"OrderPaid":                "OrderPaid",
		"urn:shop/orders?x=1&y=2":  "urn:shop/orders?x=1&y=2",
		"2026-11-29T10:00:00.123Z": "2026-11-29T10:00:00.123Z",
		"a b":                      "a%20b",
		`say "hi"`:                 "say%20%22hi%22",
		"100%":                     "100%25",
		"Zoë":                      "Zo%C3%AB",
		"tab\there":                "tab%09here",
	}
	for in, want := range tests {
		if got := encodeCEValue(in); got != want {
			t.Errorf("encodeCEValue(%q) = %q, want %q", in, got, want)
		}
	}
}
