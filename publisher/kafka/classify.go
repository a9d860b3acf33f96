package kafka

import (
	"context"
	"errors"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// permanent are the broker errors that retrying the same record cannot fix.
var permanent = []*kerr.Error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidRecord,
	kerr.InvalidTopicException,
	kerr.TopicAuthorizationFailed,
	kerr.UnknownTopicOrPartition,
	// Not kerr.UnknownTopicID: it means the client holds a stale topic id
	// (the topic was recreated, or the cluster replaced); the client
	// reloads metadata and the next attempt reaches the topic.
}

// unavailable are the broker errors that say the cluster (or the
// partition's leader) cannot take records now, whatever the record.
var unavailable = []*kerr.Error{
	kerr.BrokerNotAvailable,
	kerr.LeaderNotAvailable,
	kerr.NotLeaderForPartition,
	kerr.RequestTimedOut,
	kerr.NetworkException,
	kerr.NotEnoughReplicas,
	kerr.NotEnoughReplicasAfterAppend,
	kerr.KafkaStorageError,
}

// classify maps a produce error to the dispatcher's classification (see the
// package documentation).
func classify(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range permanent {
		if errors.Is(err, k) {
			return dispatcher.Permanent(err)
		}
	}
	for _, k := range unavailable {
		if errors.Is(err, k) {
			return dispatcher.Unavailable(err)
		}
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrClientClosed) || errors.As(err, &netErr) {
		return dispatcher.Unavailable(err)
	}
	return dispatcher.Retryable(err)
}
