package webhook

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

func TestSign_MatchesStandardWebhooksTestVector(t *testing.T) {
	t.Parallel()
	// The example of the Standard Webhooks reference libraries.
	got, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330",
		[]byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestSign_RawSecretIsKeyBytesAndMalformedWhsecFails(t *testing.T) {
	t.Parallel()
	// printf '1.1700000000.{"a":1}' | openssl dgst -sha256 -hmac secret -binary | base64
	got, err := Sign("secret", "1", "1700000000", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,8HErMLa71H0jVoOW4HEdJdsQtsR9maLty+MOQ6TvU80="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	if _, err := Sign("whsec_not base64!", "1", "1700000000", nil); !errors.Is(err, ErrInvalidSecret) {
		t.Fatalf("Sign with a malformed whsec_ secret = %v, want ErrInvalidSecret", err)
	}
}

// signedHeader is what the publisher sends for event 41 (OrderPaid) at now.
func signedHeader(t *testing.T, secrets []string, now time.Time, body []byte) http.Header {
	t.Helper()
	h := http.Header{}
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", "41")
	h.Set("Ce-Source", "urn:shop")
	h.Set("Ce-Type", "OrderPaid")
	h.Set("Ce-Subject", "o-1")
	h.Set("Ce-Time", "2026-11-29T10:00:00Z")
	h.Set(HeaderID, cloudevents.IdempotencyKey("urn:shop", "41"))
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set(HeaderTimestamp, ts)
	var keys [][]byte
	for _, s := range secrets {
		k, err := secretKey(s)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	h.Set(HeaderSignature, signatures(keys, h.Get(HeaderID), ts, h, body))
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"order_id":"o-1"}`)
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tests := []struct {
		name    string
		secret  string
		signers []string // secrets the request is signed with
		change  func(h http.Header)
		body    string
		now     time.Time
		wantErr error
	}{
		{name: "valid signature", secret: "secret", now: now},
		{name: "valid whsec secret", secret: whsec, signers: []string{whsec}, now: now},
		{name: "valid within tolerance", secret: "secret", now: now.Add(4 * time.Minute)},
		{name: "signed with old and new secret (rotation), verified with the old", secret: "old", signers: []string{"new", "old"}, now: now},
		{name: "signed with old and new secret (rotation), verified with the new", secret: "new", signers: []string{"new", "old"}, now: now},
		{name: "tampered body", secret: "secret", body: `{"order_id":"o-2"}`, now: now, wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secret: "other", now: now, wantErr: ErrSignatureMismatch},
		{name: "replay with another ce-id and ce-type", secret: "secret", now: now, wantErr: ErrSignatureMismatch,
			change: func(h http.Header) { h.Set("Ce-Id", "999"); h.Set("Ce-Type", "OrderRefunded") }},
		{name: "replay with another ce-type only", secret: "secret", now: now, wantErr: ErrSignatureMismatch,
			change: func(h http.Header) { h.Set("Ce-Type", "OrderRefunded") }},
		{name: "replay with another ce-source", secret: "secret", now: now, wantErr: ErrSignatureMismatch,
			change: func(h http.Header) { h.Set("Ce-Source", "urn:other") }},
		{name: "replay with another webhook-id", secret: "secret", now: now, wantErr: ErrSignatureMismatch,
			change: func(h http.Header) { h.Set(HeaderID, cloudevents.IdempotencyKey("urn:shop", "999")) }},
		{name: "timestamp swapped", secret: "secret", now: now, wantErr: ErrSignatureMismatch,
			change: func(h http.Header) { h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10)) }},
		{name: "stale timestamp", secret: "secret", now: now.Add(6 * time.Minute), wantErr: ErrTimestampOutOfTolerance},
		{name: "future timestamp", secret: "secret", now: now.Add(-6 * time.Minute), wantErr: ErrTimestampOutOfTolerance},
		{name: "non-numeric timestamp", secret: "secret", now: now, wantErr: ErrInvalidTimestamp,
			change: func(h http.Header) { h.Set(HeaderTimestamp, "yesterday") }},
		{name: "missing webhook-id", secret: "secret", now: now, wantErr: ErrNoID,
			change: func(h http.Header) { h.Del(HeaderID) }},
		{name: "missing signature", secret: "secret", now: now, wantErr: ErrNoSignature,
			change: func(h http.Header) { h.Del(HeaderSignature) }},
		{name: "unknown scheme only", secret: "secret", now: now, wantErr: ErrNoSignature,
			change: func(h http.Header) { h.Set(HeaderSignature, "v0,abc v1=abc") }},
		{name: "v1 only (CloudEvents headers unsigned)", secret: "secret", now: now, wantErr: ErrNoSignature,
			change: func(h http.Header) {
				h.Set(HeaderSignature, strings.Fields(h.Get(HeaderSignature))[0])
			}},
		{name: "malformed base64", secret: "secret", now: now, wantErr: ErrSignatureMismatch,
			change: func(h http.Header) { h.Set(HeaderSignature, "v1,zz v1ce,!!") }},
		{name: "malformed whsec secret", secret: "whsec_%%%", now: now, wantErr: ErrInvalidSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			signers := tt.signers
			if signers == nil {
				signers = []string{"secret"}
			}
			h := signedHeader(t, signers, now, body)
			if tt.change != nil {
				tt.change(h)
			}
			got := body
			if tt.body != "" {
				got = []byte(tt.body)
			}
			err := Verify(tt.secret, h, got, tt.now, 0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tt.secret) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
}

func TestVerify_ToleranceIsConfigurable(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	h := signedHeader(t, []string{"secret"}, now, nil)
	if err := Verify("secret", h, nil, now.Add(30*time.Second), 10*time.Second); !errors.Is(err, ErrTimestampOutOfTolerance) {
		t.Fatalf("Verify 30s late with a 10s tolerance = %v, want ErrTimestampOutOfTolerance", err)
	}
	if err := Verify("secret", h, nil, now.Add(30*time.Minute), time.Hour); err != nil {
		t.Fatalf("Verify 30m late with a 1h tolerance = %v", err)
	}
}

func TestPublish_SignedRequestVerifiesAndTamperedRequestsFail(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	now := time.Now()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	p := newPublisher(t, Config{URL: rc.URL, Secret: secret, PreviousSecrets: []string{"old-raw-secret"}})

	msg := testMessage()
	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	r := rc.received()[0]
	key := cloudevents.From(msg, "").IdempotencyKey()
	if got := r.Header.Get(HeaderID); got != key {
		t.Fatalf("webhook-id = %q, want the idempotency key %q", got, key)
	}
	if got := len(strings.Fields(r.Header.Get(HeaderSignature))); got != 4 {
		t.Fatalf("webhook-signature has %d entries, want v1 and v1ce for each of 2 secrets: %q", got, r.Header.Get(HeaderSignature))
	}
	for _, s := range []string{secret, "old-raw-secret"} {
		if err := Verify(s, r.Header, r.Body, now, time.Minute); err != nil {
			t.Fatalf("Verify on the delivered request: %v", err)
		}
	}
	tampered := append(r.Body[:len(r.Body)-1:len(r.Body)-1], []byte(" }")...)
	if err := Verify(secret, r.Header, tampered, now, time.Minute); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("Verify on a tampered body = %v, want ErrSignatureMismatch", err)
	}
	forged := r.Header.Clone()
	forged.Set("Ce-Id", "999")
	forged.Set("Ce-Type", "OrderRefunded")
	if err := Verify(secret, forged, r.Body, now, time.Minute); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("Verify with ce-id and ce-type changed = %v, want ErrSignatureMismatch", err)
	}
}

func TestNew_RejectsMalformedSecretsNamingTheField(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{URL: "http://example.com", Secret: "whsec_***"},
		{URL: "http://example.com", Secret: "ok", PreviousSecrets: []string{"whsec_"}},
		{URL: "http://example.com", PreviousSecrets: []string{"old"}},
	} {
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), "Secret") {
			t.Errorf("New(%+v) = %v, want an error naming the secret field", cfg.PreviousSecrets, err)
		}
		if err != nil && strings.Contains(err.Error(), "***") {
			t.Errorf("error %q repeats the secret", err)
		}
	}
}

// The example in docs/webhooks.md, computed there with Python's hmac module:
// the publisher sends exactly these headers, and Verify accepts them.
func TestPublish_SignsTheDocumentedExample(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Source: "urn:shop"})
	p.now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	msg := testMessage()
	msg.ID, msg.OutboxID, msg.AggregateID = "41", 41, "o-42"
	msg.Payload = []byte(`{"amount_cents": 1200}`)
	msg.CreatedAt = time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.UTC)
	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	h := rc.received()[0].Header
	for name, want := range map[string]string{
		HeaderID:        "75da0dad8c346ed92e3988b3ff910557-41",
		HeaderTimestamp: "1800000000",
		HeaderSignature: "v1,78fuQQco0pu/fuXEVOnuL0edzpoPc+Xdh7LS4ZJj6oY= v1ce,6iUB87rrqvBdVLGZTgHds4X6bhxcS9k6tpPLX7ZiqtE=",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if err := Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", h, msg.Payload, time.Unix(1_800_000_060, 0), 0); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

// A v1ce entry relabelled v1 must not verify anything for a receiver that
// checks only v1 (every Standard Webhooks library): with one key for both,
// the v1ce digest of (id, timestamp, attributes + body) is the v1 digest of
// a request whose body is the attributes followed by the original body.
func TestVerify_V1CEDigestRelabelledV1DoesNotVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"order_id":"o-1"}`)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	h := signedHeader(t, []string{secret}, now, body)
	var ceDigest string
	for field := range strings.FieldsSeq(h.Get(HeaderSignature)) {
		if v, d, _ := strings.Cut(field, ","); v == schemeV1CE {
			ceDigest = d
		}
	}
	if ceDigest == "" {
		t.Fatalf("no v1ce entry in %q", h.Get(HeaderSignature))
	}
	forged := append([]byte(signedAttributes(h)), body...)
	v1Only, err := Sign(secret, h.Get(HeaderID), h.Get(HeaderTimestamp), forged)
	if err != nil {
		t.Fatal(err)
	}
	if v1Only == schemeV1+","+ceDigest {
		t.Fatalf("the v1ce digest relabelled v1 is the v1 signature of the body %q: a v1-only receiver accepts it", forged)
	}
}
