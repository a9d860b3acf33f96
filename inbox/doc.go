// Package inbox is the consumer's half of pgoutbox: it makes processing
// effectively exactly-once and keeps each aggregate's events in commit
// order, in the consumer's own PostgreSQL database.
//
// pgoutbox delivers at least once. An Inbox runs the consumer's Handler and
// the record that the event was processed in one transaction of the
// consumer's database: a duplicate (same CloudEvents source and id) is
// acknowledged without running the handler, a handler error rolls both
// back, and two consumers racing on one message process it once (the
// second waits on the record's primary key for the first to finish).
//
// Ordered events carry their position in their aggregate's commit order and
// their predecessor's position (Position). Per aggregate the inbox decides
// whether an event is next (processed), a duplicate, early (parked in the
// inbox until its predecessor is processed, bounded by Config.MaxParkedAge
// and Config.MaxParked), or behind a gap that will never fill (the outbox
// skipped the predecessor, or it did not arrive within the bound): the gap
// is declared, logged, counted and recorded, and the events behind it are
// processed, never left waiting forever. Consumers that receive only some
// event types opt out with GapIgnore.
//
// The tables come from the inbox's own migrations (package
// inbox/migrations, `pgoutbox inbox migrate`), or under another name and
// schema from `pgoutbox inbox init`. Adapters receive from HTTP webhooks
// (inbox/inboxhttp), NATS JetStream (inbox/inboxnats), RabbitMQ
// (inbox/inboxamqp) and Kafka (inbox/inboxkafka), and acknowledge only
// after Process returned. docs/inbox.md has the wire contract, the
// retention rule and `pgoutbox verify`.
//
//	ib, err := inbox.New(inbox.Config{
//		DB: pool,
//		Handler: func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
//			_, err := tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1 WHERE sku = $1`, d.Subject)
//			return err
//		},
//	})
//	go ib.Run(ctx) // sweeps parked events, purges old records
//	outcome, err := ib.Process(ctx, msg) // acknowledge msg when err == nil
package inbox
