package webhook

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSign_IsHexHMACOfTimestampDotBody(t *testing.T) {
	t.Parallel()
	// echo -n '1700000000.{"a":1}' | openssl dgst -sha256 -hmac secret
	got := Sign("secret", "1700000000", []byte(`{"a":1}`))
	want := "v1=49f24e537407743fa4a0242bb63b94b9a47ee99cbbe071ccd8a22550ae411686"
	if got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	body := `{"order_id":"o-1"}`
	sig := Sign("secret", ts, []byte(body))
	tests := []struct {
		name      string
		secret    string
		timestamp string
		body      string
		signature string
		now       time.Time
		wantErr   error
	}{
		{name: "valid signature", secret: "secret", timestamp: ts, body: body, signature: sig, now: now},
		{name: "valid within tolerance", secret: "secret", timestamp: ts, body: body, signature: sig, now: now.Add(4 * time.Minute)},
		{name: "one of several signatures matches (rotation)", secret: "secret", timestamp: ts, body: body, signature: Sign("old", ts, []byte(body)) + " " + sig, now: now},
		{name: "tampered body", secret: "secret", timestamp: ts, body: `{"order_id":"o-2"}`, signature: sig, now: now, wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secret: "other", timestamp: ts, body: body, signature: sig, now: now, wantErr: ErrSignatureMismatch},
		{name: "timestamp swapped", secret: "secret", timestamp: strconv.FormatInt(now.Unix()+1, 10), body: body, signature: sig, now: now, wantErr: ErrSignatureMismatch},
		{name: "stale timestamp", secret: "secret", timestamp: ts, body: body, signature: sig, now: now.Add(6 * time.Minute), wantErr: ErrTimestampOutOfTolerance},
		{name: "future timestamp", secret: "secret", timestamp: ts, body: body, signature: sig, now: now.Add(-6 * time.Minute), wantErr: ErrTimestampOutOfTolerance},
		{name: "non-numeric timestamp", secret: "secret", timestamp: "yesterday", body: body, signature: sig, now: now, wantErr: ErrInvalidTimestamp},
		{name: "missing signature", secret: "secret", timestamp: ts, body: body, signature: "", now: now, wantErr: ErrNoSignature},
		{name: "unknown scheme only", secret: "secret", timestamp: ts, body: body, signature: "v0=abc", now: now, wantErr: ErrNoSignature},
		{name: "malformed hex", secret: "secret", timestamp: ts, body: body, signature: "v1=zz", now: now, wantErr: ErrSignatureMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tt.secret, tt.timestamp, tt.body, tt.signature, tt.now, 0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tt.secret) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
}

func TestPublish_SignedRequestVerifiesAndTamperedBodyFails(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	now := time.Now()
	p := newPublisher(t, Config{URL: rc.URL, Secret: "s3cret"})

	if err := p.Publish(context.Background(), testMessage()); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	r := rc.received()[0]
	ts, sig := r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature)
	if err := Verify("s3cret", ts, string(r.Body), sig, now, time.Minute); err != nil {
		t.Fatalf("Verify on the delivered request: %v", err)
	}
	tampered := string(r.Body[:len(r.Body)-1]) + " }"
	if err := Verify("s3cret", ts, tampered, sig, now, time.Minute); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("Verify on a tampered body = %v, want ErrSignatureMismatch", err)
	}
}
