package inbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// The consumer reads the attributes the publishers write.
func TestBinding_ParsesWhatThePublishersWrite(t *testing.T) {
	t.Parallel()
	if inbox.AttrSeq != cloudevents.AttrSeq || inbox.AttrPrevSeq != cloudevents.AttrPrevSeq || inbox.AttrPrevSent != cloudevents.AttrPrevSent {
		t.Fatal("the position attribute names differ between producer and consumer")
	}
	created := time.Date(2026, 12, 1, 10, 0, 0, 5000, time.UTC)
	msg := dispatcher.Message{ID: "41", Source: "urn:shop", AggregateID: "o 1%", EventType: "OrderPaid", CreatedAt: created,
		Position: dispatcher.Position{Seq: 90, Prev: 70, Skipped: true, Sent: 12}}
	want := inbox.Message{Source: "urn:shop", ID: "41", Type: "OrderPaid", Subject: "o 1%", Time: created, Data: []byte(`{}`),
		Headers:  map[string]string{"tenant": "t1"},
		Position: inbox.Position{Seq: 90, Prev: 70, Skipped: true, Sent: 12}}
	for name, tc := range map[string]struct {
		b      inbox.Binding
		prefix string
		encode func(string) string
	}{
		"http":  {inbox.BindingHTTP, "Ce-", percentEncode},
		"nats":  {inbox.BindingNATS, "ce-", percentEncode},
		"kafka": {inbox.BindingKafka, "ce_", func(s string) string { return s }},
		"amqp":  {inbox.BindingAMQP, "cloudEvents_", func(s string) string { return s }},
	} {
		headers := map[string]string{"tenant": "t1"}
		for k, v := range cloudevents.From(msg, "").Map(tc.prefix) {
			headers[k] = tc.encode(v)
		}
		delete(headers, tc.prefix+"datacontenttype")
		got, err := tc.b.Parse(headers, []byte(`{}`))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	// Unordered: no position.
	msg.Position = dispatcher.Position{}
	got, err := inbox.BindingKafka.Parse(cloudevents.From(msg, "").Map("ce_"), nil)
	if err != nil || got.Position != (inbox.Position{}) {
		t.Fatalf("unordered: %+v, %v", got.Position, err)
	}
}

// percentEncode is the HTTP and NATS bindings' encoding of a value.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '%' {
			out = append(out, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		out = append(out, c)
	}
	return string(out)
}

func TestBinding_RejectsUnreadableAttributes(t *testing.T) {
	t.Parallel()
	for _, headers := range []map[string]string{
		{"ce_id": "1", "ce_source": "s", "ce_pgoutboxseq": "seven"},
		{"ce_id": "1", "ce_source": "s", "ce_time": "yesterday"},
	} {
		if _, err := inbox.BindingKafka.Parse(headers, nil); !errors.Is(err, inbox.ErrInvalidMessage) {
			t.Errorf("Parse(%v) = %v, want ErrInvalidMessage", headers, err)
		}
	}
	if _, err := inbox.BindingHTTP.Parse(map[string]string{"Ce-Id": "%zz"}, nil); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Errorf("bad percent-encoding: %v", err)
	}
}
