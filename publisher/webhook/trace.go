package webhook

import "github.com/pgoutbox/pgoutbox/dispatcher"

var _ dispatcher.MessagingDestination = (*Publisher)(nil)

// MessagingSystem names the transport on the dispatcher's publish span.
func (p *Publisher) MessagingSystem() string { return "http" }

// DestinationName is the receiver's scheme and host: the path and query are
// left out, as they often embed a token.
func (p *Publisher) DestinationName(dispatcher.Message) string {
	return p.url.Scheme + "://" + p.url.Host
}
