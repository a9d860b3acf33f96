package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ToleranceDefault is the timestamp tolerance Verify applies when given zero.
const ToleranceDefault = 5 * time.Minute

// signatureScheme prefixes a signature: the version of the signing scheme.
const signatureScheme = "v1="

// Errors returned by Verify; test them with errors.Is.
var (
	// ErrNoSignature means the signature header is empty or carries no v1
	// signature.
	ErrNoSignature = errors.New("webhook: no v1 signature")
	// ErrInvalidTimestamp means the timestamp header is not Unix seconds.
	ErrInvalidTimestamp = errors.New("webhook: invalid signature timestamp")
	// ErrTimestampOutOfTolerance means the timestamp is further from now
	// than the tolerance: a replayed or badly delayed request.
	ErrTimestampOutOfTolerance = errors.New("webhook: signature timestamp outside tolerance")
	// ErrSignatureMismatch means no signature matches the body: a tampered
	// body, a wrong secret, or a different timestamp.
	ErrSignatureMismatch = errors.New("webhook: signature mismatch")
)

// Sign returns the Webhook-Signature value for body sent at timestamp (Unix
// seconds, as in Webhook-Timestamp): "v1=" followed by the lowercase hex
// HMAC-SHA256 of timestamp + "." + body keyed with secret.
func Sign(secret, timestamp string, body []byte) string {
	return signatureScheme + hex.EncodeToString(mac(secret, timestamp, body))
}

func mac(secret, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a signed request on the receiving side: timestamp and
// signature are the Webhook-Timestamp and Webhook-Signature headers, body the
// raw request body, now the receiver's clock. It returns nil when the
// timestamp is within tolerance of now (ToleranceDefault when tolerance is
// zero or negative) and one of the space-separated signatures is a v1
// signature of timestamp + "." + body under secret (several signatures allow
// rotating the secret). The comparison is constant-time. Errors wrap
// ErrInvalidTimestamp, ErrTimestampOutOfTolerance, ErrNoSignature or
// ErrSignatureMismatch and never contain the secret.
func Verify(secret, timestamp, body, signature string, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = ToleranceDefault
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrInvalidTimestamp, truncate(timestamp, 32))
	}
	sent := time.Unix(sec, 0)
	if skew := now.Sub(sent); skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%w: sent %s, now %s, tolerance %s", ErrTimestampOutOfTolerance,
			sent.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), tolerance)
	}
	want := mac(secret, timestamp, []byte(body))
	found := false
	for field := range strings.FieldsSeq(signature) {
		digest, ok := strings.CutPrefix(field, signatureScheme)
		if !ok {
			continue
		}
		found = true
		got, err := hex.DecodeString(digest)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	if !found {
		return ErrNoSignature
	}
	return ErrSignatureMismatch
}
