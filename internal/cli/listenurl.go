package cli

import (
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
)

// resolveListenURL sets cfg.ListenURL from --listen-url, else
// $PGOUTBOX_LISTEN_URL, and checks it parses (without connecting). Its
// password joins the secrets scrubbed from every message.
func (a *app) resolveListenURL(f *flags, cfg *dispatcher.Config, flagValue string) error {
	raw, source := flagValue, "--listen-url"
	if raw == "" {
		raw, source = a.getenv(envListenURL), envListenURL
	}
	if raw == "" {
		return nil
	}
	if cfg.DisableListen {
		if source == envListenURL {
			return nil // the environment may be shared by relays with and without LISTEN
		}
		return f.usageError("--listen-url and --no-listen contradict each other: --no-listen turns LISTEN off")
	}
	a.secrets.Add(redact.Secrets(raw, false)...)
	if msg := schemeError(raw); msg != "" {
		return failf("invalid listen URL %s: %s; check %s", redact.URL(raw, false), msg, source)
	}
	pc, err := pgx.ParseConfig(raw)
	if err != nil {
		return failf("invalid listen URL %s: %s; check %s", redact.URL(raw, false), a.secrets.Scrub(unwrapParse(err)), source)
	}
	a.secrets.Add(pc.Password)
	cfg.ListenURL = raw
	return nil
}
