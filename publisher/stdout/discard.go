package stdout

import (
	"context"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Discard is a Publisher that drops every message and returns nil, so that
// a benchmark measures the relay (claim, finalize) and not a downstream. Its
// zero value is ready to use: stdout.Discard{}.
type Discard struct{}

var _ dispatcher.Publisher = Discard{}

// Publish drops msg and returns nil.
func (Discard) Publish(context.Context, dispatcher.Message) error { return nil }
