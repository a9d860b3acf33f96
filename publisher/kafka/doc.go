// Package kafka is a dispatcher.Publisher that produces each outbox message
// to Apache Kafka with franz-go: a CloudEvent in binary content mode.
//
// # Record
//
//   - topic: Config.TopicTemplate rendered for the message, or Config.Topic;
//   - key: Message.AggregateID, so every event of one aggregate lands on the
//     same partition (franz-go's default partitioner hashes keys with
//     murmur2, like the Java client) and keeps its order there (an empty
//     aggregate id produces a record without a key);
//   - value: Message.Payload byte for byte;
//   - headers: the CloudEvents attributes with the Kafka binding's "ce_"
//     prefix (ce_specversion, ce_id = outbox id, ce_source = Config.Source
//     or else Message.Source, ce_type = event_type, ce_subject =
//     aggregate_id, ce_time = created_at), then content-type:
//     application/json (the binding carries datacontenttype there, so no
//     ce_datacontenttype is sent), then idempotency_key =
//     cloudevents.IdempotencyKey(ce_source, ce_id), the key consumers
//     deduplicate on (ce_id alone repeats between outboxes), then
//     Message.Headers sorted by name. A message header whose name equals a
//     reserved one, ignoring case, is dropped: a message cannot forge its
//     identity.
//   - timestamp: the produce time. created_at travels as ce_time rather than
//     as the record timestamp, so that a message delivered late is not
//     deleted early by time-based retention.
//
// The producer is idempotent (franz-go's default; New refuses
// ClientOptions that disable it) and waits for all in-sync replicas
// (acks=all, applied after ClientOptions so it cannot be overridden).
// Publish waits for the broker's acknowledgement, and returns when
// Config.ProduceTimeout or the caller's ctx ends even if a request is still
// in flight: for that the client is built with
// kgo.AllowIdempotentProduceCancellation, so a record whose deadline passed
// is failed rather than held until the broker answers. Such a record may
// still land, and its retry then lands twice: the outbox already delivers
// at least once, and consumers deduplicate on idempotency_key. Lingering is off
// (kgo.ProducerLinger(0), overridable in ClientOptions) because every
// Publish waits for its record; records queued behind an in-flight request
// are still batched.
//
// # Error mapping
//
// Publish returns nil once the record is acknowledged, or an error
// classified for the dispatcher:
//
//   - dispatcher.Permanent, retrying cannot help:
//     kerr.MessageTooLarge (the record exceeds the broker's or topic's
//     max.message.bytes, or the client's ProducerBatchMaxBytes),
//     kerr.RecordListTooLarge, kerr.InvalidRecord (the broker's validation
//     rejected the record), kerr.InvalidTopicException,
//     kerr.TopicAuthorizationFailed, and kerr.UnknownTopicOrPartition
//     (franz-go returns it only after UnknownTopicRetries, default 4,
//     metadata loads found no such topic, about a second against a live
//     cluster, and only with auto-creation disabled; a ProduceTimeout
//     shorter than that yields a Retryable deadline instead), and a topic the
//     template renders empty with no Config.Topic to fall back on, or
//     renders to an invalid name, or fails to render for this message.
//   - dispatcher.Unavailable, the cluster cannot take records now (no
//     attempt spent while it is down; the dispatcher's breaker opens and
//     probes it, docs/failures.md): kerr.BrokerNotAvailable,
//     LeaderNotAvailable, NotLeaderForPartition, RequestTimedOut,
//     NetworkException, NotEnoughReplicas, NotEnoughReplicasAfterAppend and
//     KafkaStorageError, the context deadline (Config.ProduceTimeout) and
//     cancellation by the caller, kgo.ErrRecordTimeout, kgo.ErrClientClosed
//     (Publish after Close) and connection-level errors (dial failures,
//     broken connections).
//   - dispatcher.Retryable, everything else: every other kerr error
//     (whether kerr.IsRetriable reports it or not, among them
//     CLUSTER_AUTHORIZATION_FAILED or sequence errors, which an operator
//     can fix). kerr.UnknownTopicID is Retryable too: the topic was deleted and
//     recreated (or the cluster replaced) and franz-go keeps failing the
//     old topic id, so Publish purges the topic from the producer
//     (PurgeTopicsFromProducing) and the next attempt uses the new id
//     (records that concurrent Publish calls had buffered for that topic
//     fail with it and are retried the same way). With franz-go v1.21 (the
//     version this module requires, the newest whose go line is 1.25) the
//     client first retries such a record itself, UnknownTopicRetries (4)
//     times one metadata refresh (MetadataMinAge, 5 s) apart, so recovery
//     after a topic was recreated takes about 25 s by default (measured);
//     pass kgo.MetadataMinAge or kgo.UnknownTopicRetries in
//     Config.ClientOptions to shorten it. An application that requires
//     franz-go v1.22 or later gets the immediate failure and retry.
//
// A Retryable or Unavailable error carries no minimum delay: the
// dispatcher's backoff (or breaker) decides. Errors name the topic; they never contain SASL credentials or
// payloads.
package kafka
