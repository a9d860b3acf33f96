package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ToleranceDefault is the timestamp tolerance Verify applies when given zero.
const ToleranceDefault = 5 * time.Minute

// SecretPrefix marks a secret in the Standard Webhooks format: "whsec_"
// followed by the base64 (standard alphabet, padded) of the key bytes.
// A secret without the prefix is used as raw key bytes.
const SecretPrefix = "whsec_"

// Signature versions in Webhook-Signature.
const (
	// schemeV1 is the Standard Webhooks symmetric signature:
	// HMAC-SHA256 over id.timestamp.body.
	schemeV1 = "v1"
	// schemeV1CE is pgoutbox's companion signature that also covers the
	// CloudEvents headers (see signedAttributes), under a key of its own
	// (ceKey). Standard Webhooks libraries skip versions they do not know.
	schemeV1CE = "v1ce"
)

// ceKeyLabel derives the v1ce key from the secret's key: ceKey(key) =
// HMAC-SHA256(key, ceKeyLabel). With the same key for both, a v1ce digest
// (over id.timestamp.attributes body) relabelled "v1" would verify, for a
// receiver that checks only v1, a request whose body is the attributes
// followed by the original body. Under a key of its own a v1ce digest is
// never a v1 digest of anything.
const ceKeyLabel = "pgoutbox webhook v1ce"

// ceKey returns the v1ce key of a secret's key (see ceKeyLabel).
func ceKey(key []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(ceKeyLabel))
	return h.Sum(nil)
}

// Errors returned by Verify; test them with errors.Is.
var (
	// ErrInvalidSecret means a secret starts with SecretPrefix but the rest
	// is not base64 of at least one byte.
	ErrInvalidSecret = errors.New("webhook: invalid whsec_ secret")
	// ErrNoID means the webhook-id header is missing.
	ErrNoID = errors.New("webhook: no webhook-id")
	// ErrNoSignature means the signature header is empty or carries no v1
	// (or, for Verify, no v1ce) signature.
	ErrNoSignature = errors.New("webhook: no v1 signature")
	// ErrInvalidTimestamp means the timestamp header is not Unix seconds.
	ErrInvalidTimestamp = errors.New("webhook: invalid signature timestamp")
	// ErrTimestampOutOfTolerance means the timestamp is further from now
	// than the tolerance: a replayed or badly delayed request.
	ErrTimestampOutOfTolerance = errors.New("webhook: signature timestamp outside tolerance")
	// ErrSignatureMismatch means no signature matches: a tampered body, id,
	// timestamp or CloudEvents header, or a wrong secret.
	ErrSignatureMismatch = errors.New("webhook: signature mismatch")
)

// secretKey returns the HMAC key of secret.
func secretKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, ErrInvalidSecret
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature of a request: "v1," followed
// by the base64 of HMAC-SHA256(key, id + "." + timestamp + "." + body), where
// id is the webhook-id header, timestamp the webhook-timestamp header (Unix
// seconds) and key the secret's key (see SecretPrefix). It fails only for a
// malformed whsec_ secret (ErrInvalidSecret).
func Sign(secret, id, timestamp string, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return schemeV1 + "," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp, "", body)), nil
}

// mac is HMAC-SHA256 over id.timestamp.[attrs]body: attrs is empty for v1
// and signedAttributes (ending in a newline) for v1ce, whose key is
// ceKey(key).
func mac(key []byte, id, timestamp, attrs string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write([]byte(attrs))
	h.Write(body)
	return h.Sum(nil)
}

// signedCEHeaders are the CloudEvents headers the v1ce signature covers, in
// this order.
var signedCEHeaders = []string{"Ce-Specversion", "Ce-Id", "Ce-Source", "Ce-Type", "Ce-Subject", "Ce-Time"}

// signedAttributes is the text the v1ce signature inserts before the body:
// each of signedCEHeaders' values as sent (percent-encoded, so never a
// newline), each followed by "\n"; a missing header counts as empty.
func signedAttributes(h http.Header) string {
	var b strings.Builder
	for _, name := range signedCEHeaders {
		b.WriteString(h.Get(name))
		b.WriteByte('\n')
	}
	return b.String()
}

// signatures returns the Webhook-Signature value for a request with
// header h (its CloudEvents headers set) under keys: for each key a v1 and
// a v1ce signature, space-separated.
func signatures(keys [][]byte, id, timestamp string, h http.Header, body []byte) string {
	attrs := signedAttributes(h)
	parts := make([]string, 0, 2*len(keys))
	for _, key := range keys {
		parts = append(parts,
			schemeV1+","+base64.StdEncoding.EncodeToString(mac(key, id, timestamp, "", body)),
			schemeV1CE+","+base64.StdEncoding.EncodeToString(mac(ceKey(key), id, timestamp, attrs, body)))
	}
	return strings.Join(parts, " ")
}

// Verify checks a signed request on the receiving side: header is the
// request's headers, body the raw request body, now the receiver's clock and
// secret the shared secret (whsec_… or raw). It returns nil when
//
//   - webhook-id is present (it is the idempotency key: deduplicate on it),
//   - webhook-timestamp is Unix seconds within tolerance of now
//     (ToleranceDefault, 5 minutes, when tolerance is zero or negative),
//   - webhook-signature (a space-separated list, several entries while a
//     secret is rotated) holds a v1 signature of id.timestamp.body under
//     secret (the Standard Webhooks check), and
//   - it holds a v1ce signature of id.timestamp.attributes body under
//     the key derived from secret for v1ce (see ceKeyLabel), which also covers ce-specversion, ce-id, ce-source, ce-type,
//     ce-subject and ce-time, so that a replay with another ce-id or ce-type
//     does not verify either.
//
// The comparison is constant-time. Errors wrap ErrInvalidSecret, ErrNoID,
// ErrInvalidTimestamp, ErrTimestampOutOfTolerance, ErrNoSignature or
// ErrSignatureMismatch and never contain the secret. The exact bytes signed
// are documented in docs/webhooks.md for receivers in other languages.
func Verify(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	if tolerance <= 0 {
		tolerance = ToleranceDefault
	}
	id := header.Get(HeaderID)
	if id == "" {
		return ErrNoID
	}
	timestamp := header.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrInvalidTimestamp, truncate(timestamp, 32))
	}
	sent := time.Unix(sec, 0)
	if skew := now.Sub(sent); skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%w: sent %s, now %s, tolerance %s", ErrTimestampOutOfTolerance,
			sent.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), tolerance)
	}
	wantV1 := mac(key, id, timestamp, "", body)
	wantCE := mac(ceKey(key), id, timestamp, signedAttributes(header), body)
	var seenV1, seenCE, okV1, okCE bool
	for field := range strings.FieldsSeq(header.Get(HeaderSignature)) {
		version, digest, found := strings.Cut(field, ",")
		if !found {
			continue
		}
		var want []byte
		switch version {
		case schemeV1:
			seenV1, want = true, wantV1
		case schemeV1CE:
			seenCE, want = true, wantCE
		default:
			continue
		}
		got, err := base64.StdEncoding.DecodeString(digest)
		if err != nil || !hmac.Equal(got, want) {
			continue
		}
		if version == schemeV1 {
			okV1 = true
		} else {
			okCE = true
		}
	}
	switch {
	case !seenV1:
		return ErrNoSignature
	case !seenCE:
		return fmt.Errorf("%w (no v1ce signature: the CloudEvents headers are not signed)", ErrNoSignature)
	case !okV1 || !okCE:
		return ErrSignatureMismatch
	}
	return nil
}
