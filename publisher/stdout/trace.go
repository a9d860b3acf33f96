package stdout

import "github.com/pgoutbox/pgoutbox/dispatcher"

var (
	_ dispatcher.MessagingDestination = (*Publisher)(nil)
	_ dispatcher.MessagingDestination = Discard{}
)

// MessagingSystem names the transport on the dispatcher's publish span.
func (p *Publisher) MessagingSystem() string { return "stdout" }

// DestinationName is "stdout".
func (p *Publisher) DestinationName(dispatcher.Message) string { return "stdout" }

// MessagingSystem names the transport on the dispatcher's publish span.
func (Discard) MessagingSystem() string { return "discard" }

// DestinationName is "discard".
func (Discard) DestinationName(dispatcher.Message) string { return "discard" }
