package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Publisher posts messages to one webhook URL. It is safe for concurrent use.
type Publisher struct {
	cfg       Config
	url       *url.URL
	client    *http.Client
	ownClient bool
	keys      [][]byte // HMAC keys: Secret, then PreviousSecrets
	now       func() time.Time
}

var (
	_ dispatcher.Publisher = (*Publisher)(nil)
	_ dispatcher.Pinger    = (*Publisher)(nil)
)

// New validates cfg, applies its defaults and returns a Publisher. Errors
// wrap dispatcher.ErrInvalidConfig and name the offending field.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, url: u, now: time.Now}
	for i, secret := range append([]string{cfg.Secret}, cfg.PreviousSecrets...) {
		if secret == "" {
			continue
		}
		key, err := secretKey(secret)
		if err != nil {
			field := cfg.name("Secret")
			if i > 0 {
				field = fmt.Sprintf("%s[%d]", cfg.name("PreviousSecrets"), i-1)
			}
			return nil, invalid("%s: starts with %q but the rest is not base64 of a key", field, SecretPrefix)
		}
		p.keys = append(p.keys, key)
	}
	if cfg.Client == nil {
		p.client = &http.Client{Transport: defaultTransport()}
		p.ownClient = true
	} else {
		c := *cfg.Client
		p.client = &c
	}
	p.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return p, nil
}

func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.TLSHandshakeTimeout = 10 * time.Second
	return t
}

// Publish posts msg and classifies the outcome (see the package
// documentation for the mapping).
func (p *Publisher) Publish(ctx context.Context, msg dispatcher.Message) error {
	header, err := buildHeader(msg, p.cfg.Headers, p.cfg.Source)
	if err != nil {
		return dispatcher.Permanent(err)
	}
	body := []byte(msg.Payload)
	if len(p.keys) > 0 {
		ts := strconv.FormatInt(p.now().Unix(), 10)
		header.Set(HeaderTimestamp, ts)
		header.Set(HeaderSignature, signatures(p.keys, header.Get(HeaderID), ts, header, body))
	}

	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(body))
	if err != nil {
		// The URL was validated by New; keep it out of the message anyway.
		return dispatcher.Permanent(fmt.Errorf("webhook: build request to %s: %w", p.url.Host, unwrapURLError(err)))
	}
	req.Header = header
	// One request per publish: with a rewindable body and the
	// Idempotency-Key header, net/http's transport would send the POST again
	// by itself when the connection breaks before the answer (the receiver
	// then gets it twice within one claim). Retrying is the dispatcher's
	// decision; without GetBody the transport never replays.
	req.GetBody = nil
	resp, err := p.client.Do(req)
	if err != nil {
		// No answer: the receiver (or the way to it) is unavailable.
		return dispatcher.Unavailable(fmt.Errorf("webhook: post to %s: %w", p.url.Host, unwrapURLError(err)))
	}
	return classifyResponse(resp, p.cfg, p.now())
}

// unwrapURLError strips the *url.Error that net/http wraps around transport
// errors: its text repeats the full URL, which may embed a token.
func unwrapURLError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// Close releases the idle connections of the default client. A Client given
// in Config is left alone. Close always returns nil.
func (p *Publisher) Close() error {
	if p.ownClient {
		p.client.CloseIdleConnections()
	}
	return nil
}
