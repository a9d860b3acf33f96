// Package settle is the step the broker adapters share: run one received
// message through the inbox, then settle it with its transport according
// to the outcome.
package settle

import (
	"context"
	"errors"
	"log/slog"

	"github.com/pgoutbox/pgoutbox/inbox"
)

// Ops are a transport's ways of settling one message.
type Ops struct {
	// Adapter names the adapter in logs (inboxnats, inboxamqp).
	Adapter string
	// Ack: the inbox transaction committed (processed, duplicate, parked
	// or late).
	Ack func() error
	// Reject: the inbox cannot record the message (inbox.ErrInvalidMessage);
	// retrying would fail the same way.
	Reject func() error
	// Retry: nothing was committed; deliver the message again.
	Retry func() error
}

// Process processes m (whose conversion from the transport failed with
// parseErr, when not nil) and settles it with ops. It returns the outcome
// and the error of inbox.Process (or parseErr).
func Process(ctx context.Context, ib *inbox.Inbox, m inbox.Message, parseErr error, ops Ops, log *slog.Logger) (inbox.Outcome, error) {
	out, err := inbox.Outcome(0), parseErr
	if err == nil {
		out, err = ib.Process(ctx, m)
	}
	var settle error
	switch {
	case err == nil:
		settle = ops.Ack()
	case errors.Is(err, inbox.ErrInvalidMessage):
		log.Error(ops.Adapter+": message rejected: the inbox cannot record it", slog.String("id", m.ID), slog.Any("error", err))
		settle = ops.Reject()
	default:
		log.Warn(ops.Adapter+": message not processed; it will be delivered again", slog.String("id", m.ID), slog.Any("error", err))
		settle = ops.Retry()
	}
	if settle != nil {
		log.Warn(ops.Adapter+": settling a message failed; it will be delivered again", slog.String("id", m.ID), slog.Any("error", settle))
	}
	return out, err
}
