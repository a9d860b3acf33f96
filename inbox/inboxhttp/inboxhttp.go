// Package inboxhttp receives pgoutbox's webhooks into an inbox: an
// http.Handler that verifies the Standard Webhooks signature the webhook
// publisher sends (publisher/webhook: webhook-id, webhook-timestamp and the
// v1 and v1ce signatures), reads the CloudEvents headers and the position,
// and runs the event through inbox.Process before it answers.
//
// The answer is the publisher's classification: 200 once the event is
// processed, a duplicate, parked or late (the inbox holds what it needs:
// the outbox marks it delivered); 500 when the handler or the database
// failed (nothing was committed: the outbox retries); 401 for a request
// that does not verify, 400 for one the inbox cannot record, 405 and 413
// for a wrong method or an oversized body (the outbox sends these to dead,
// where they wait for a person).
package inboxhttp

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// MaxBodyDefault is the largest request body accepted by default.
const MaxBodyDefault = 1 << 20

// Config configures the Handler.
type Config struct {
	// Inbox processes each event. Required.
	Inbox *inbox.Inbox
	// Secret is the webhook secret shared with the publisher
	// (webhook.Config.Secret: whsec_… or raw). Required unless Unsigned.
	Secret string
	// PreviousSecrets are also accepted while a secret is rotated.
	// Defaults to none.
	PreviousSecrets []string
	// Unsigned accepts requests without verifying a signature (a receiver
	// reachable only from the relay, or tests). Defaults to false.
	Unsigned bool
	// Tolerance bounds the distance between webhook-timestamp and the
	// receiver's clock. Defaults to webhook.ToleranceDefault (5 minutes).
	Tolerance time.Duration
	// MaxBody is the largest request body accepted, in bytes. Defaults to
	// MaxBodyDefault (1 MiB).
	MaxBody int64
	// Logger receives rejected requests and failures. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Handler is the http.Handler of an inbox.
type Handler struct {
	cfg     Config
	secrets []string
	now     func() time.Time
}

// New validates cfg and returns the Handler. Errors name the field.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Inbox == nil:
		return nil, errors.New("inboxhttp: Config.Inbox is required")
	case cfg.Secret == "" && !cfg.Unsigned:
		return nil, errors.New("inboxhttp: Config.Secret is required (the webhook publisher's secret), or set Config.Unsigned")
	case cfg.Secret != "" && cfg.Unsigned:
		return nil, errors.New("inboxhttp: Config.Unsigned is set together with Config.Secret; choose one")
	case cfg.MaxBody < 0:
		return nil, fmt.Errorf("inboxhttp: Config.MaxBody must not be negative, got %d", cfg.MaxBody)
	}
	cfg.MaxBody = cmp.Or(cfg.MaxBody, MaxBodyDefault)
	cfg.Tolerance = cmp.Or(cfg.Tolerance, webhook.ToleranceDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, now: time.Now}
	for i, s := range append([]string{cfg.Secret}, cfg.PreviousSecrets...) {
		if s == "" {
			continue
		}
		// An invalid whsec_ secret fails every verification: say so now.
		if err := webhook.Verify(s, http.Header{}, nil, time.Now(), 0); errors.Is(err, webhook.ErrInvalidSecret) {
			field := "Secret"
			if i > 0 {
				field = fmt.Sprintf("PreviousSecrets[%d]", i-1)
			}
			return nil, fmt.Errorf("inboxhttp: Config.%s: %w", field, err)
		}
		h.secrets = append(h.secrets, s)
	}
	return h, nil
}

// ServeHTTP verifies, parses and processes one webhook request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.MaxBody+1))
	if err != nil {
		http.Error(w, "reading the body failed", http.StatusBadRequest)
		return
	}
	if int64(len(body)) > h.cfg.MaxBody {
		h.reject(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", h.cfg.MaxBody))
		return
	}
	if err := h.verify(r.Header, body); err != nil {
		h.reject(w, r, http.StatusUnauthorized, err)
		return
	}
	headers := make(map[string]string, len(r.Header))
	for name, values := range r.Header {
		switch name {
		case webhook.HeaderSignature, webhook.HeaderTimestamp, webhook.HeaderID, webhook.HeaderIdempotencyKey, "Content-Length":
			continue
		}
		headers[name] = values[0]
	}
	msg, err := inbox.BindingHTTP.Parse(headers, bytes.Clone(body))
	if err == nil {
		var out inbox.Outcome
		if out, err = h.cfg.Inbox.Process(r.Context(), msg); err == nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, out)
			return
		}
	}
	if errors.Is(err, inbox.ErrInvalidMessage) {
		h.reject(w, r, http.StatusBadRequest, err)
		return
	}
	h.cfg.Logger.Warn("inboxhttp: event not processed; the sender will retry", slog.String("id", msg.ID), slog.Any("error", err))
	http.Error(w, "not processed, retry later", http.StatusInternalServerError)
}

// verify checks the signature under any accepted secret.
func (h *Handler) verify(header http.Header, body []byte) error {
	if h.cfg.Unsigned {
		return nil
	}
	var err error
	for _, s := range h.secrets {
		if err = webhook.Verify(s, header, body, h.now(), h.cfg.Tolerance); err == nil {
			return nil
		}
	}
	return err
}

func (h *Handler) reject(w http.ResponseWriter, r *http.Request, status int, err error) {
	h.cfg.Logger.Warn("inboxhttp: request rejected", slog.Int("status", status), slog.String("remote", r.RemoteAddr), slog.Any("error", err))
	http.Error(w, err.Error(), status)
}
