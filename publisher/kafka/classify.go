package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

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
	return dispatcher.Retryable(err)
}
