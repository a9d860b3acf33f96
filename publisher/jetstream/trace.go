package jetstream

import "github.com/pgoutbox/pgoutbox/dispatcher"

var _ dispatcher.MessagingDestination = (*Publisher)(nil)

// MessagingSystem names the transport on the dispatcher's publish span.
func (p *Publisher) MessagingSystem() string { return "nats" }

// DestinationName is the subject msg is published to.
func (p *Publisher) DestinationName(msg dispatcher.Message) string {
	subject, err := render(p.subject, msg)
	if err != nil {
		return "(invalid subject)"
	}
	return subject
}
