package rabbitmq

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/outagetest"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// RabbitMQ refusing connections while a backlog waits (a proxy in front of
// the broker resets every connection), then accepting them again: the
// relay's breaker opens and probes, no attempt is spent and nothing goes to
// dead; once the broker is reachable every message is routed, each ordered
// aggregate in commit order.
func TestBreaker_RabbitMQConnectionRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	p := newPublisher(t, Config{URL: u.String(), Exchange: b.exchange, ConfirmTimeout: time.Second,
		ReconnectDelay: 10 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond})
	outagetest.Run(t, outagetest.Outage{
		Publisher: p,
		Down:      func(*testing.T) { proxy.Down() },
		Up:        func(*testing.T) { proxy.Up() },
		Delivered: func(t *testing.T) []outagetest.Delivered {
			var out []outagetest.Delivered
			for _, d := range b.drain(t) {
				id, _ := strconv.ParseInt(d.Headers["cloudEvents_id"].(string), 10, 64)
				subject, _ := d.Headers["cloudEvents_subject"].(string)
				out = append(out, outagetest.Delivered{AggregateID: subject, OutboxID: id})
			}
			return out
		},
	}, 20)
}
