package kafka

import "github.com/pgoutbox/pgoutbox/dispatcher"

var _ dispatcher.MessagingDestination = (*Publisher)(nil)

// MessagingSystem names the transport on the dispatcher's publish span.
func (p *Publisher) MessagingSystem() string { return "kafka" }

// DestinationName is the topic msg is produced to.
func (p *Publisher) DestinationName(msg dispatcher.Message) string {
	topic, err := p.topicFor(msg)
	if err != nil {
		return "(invalid topic)"
	}
	return topic
}
