package rabbitmq

import "github.com/pgoutbox/pgoutbox/dispatcher"

var _ dispatcher.MessagingDestination = (*Publisher)(nil)

// MessagingSystem names the transport on the dispatcher's publish span.
func (p *Publisher) MessagingSystem() string { return "rabbitmq" }

// DestinationName is the exchange ("amq.default" for the default exchange,
// as the OpenTelemetry conventions name it).
func (p *Publisher) DestinationName(dispatcher.Message) string {
	if p.cfg.Exchange == "" {
		return "amq.default"
	}
	return p.cfg.Exchange
}
