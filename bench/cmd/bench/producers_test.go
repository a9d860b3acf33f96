package main

import (
	"strings"
	"testing"
)

// producerResults is item 4b's results with the one-INSERT cases, as runs
// before the COPY cases recorded them (PerTx unset).
func producerResults() *results {
	r := &results{ProducerClients: 8, ProducerSeconds: 5}
	for _, c := range []producerCase{
		{Name: "plain", TxPerSec: 4000, WALPerTx: 300},
		{Name: "unordered", Schema: "before", TxPerSec: 3000, WALPerTx: 900},
		{Name: "unordered", Schema: "after", TxPerSec: 3200, WALPerTx: 800},
		{Name: "unordered-idle", Schema: "after", TxPerSec: 3600, WALPerTx: 800},
		{Name: "ordered", Schema: "before", TxPerSec: 2000, WALPerTx: 1500},
		{Name: "ordered", Schema: "after", TxPerSec: 2400, WALPerTx: 1400},
		{Name: "ordered-hot", Schema: "before", TxPerSec: 900, WALPerTx: 1500},
		{Name: "ordered-hot", Schema: "after", TxPerSec: 1000, WALPerTx: 1400},
		{Name: "flush-bound", TxPerSec: 1100, WALPerTx: 200},
	} {
		c.Rounds = []float64{c.TxPerSec}
		r.Producers = append(r.Producers, c)
	}
	return r
}

func TestProducerTable_WithoutCopyCasesIsUnchanged(t *testing.T) {
	t.Parallel()
	table := strings.Join(producerTable(producerResults()), "\n")
	for _, want := range []string{
		"| plain table, primary key only | 4,000 | 4,000 | 1× | 300 B | |",
		"| outbox, unordered, no relay waiting (relays busy, or none) | 3,000 | 3,200 | 0.75× → 0.80× | 900 → 800 B (3.00× → 2.67×) | 3,200 |",
		// A relay waiting idle is measured after only: its before is the
		// same insert into the before schema.
		"| outbox, unordered, a relay waiting idle (COMMITs notify) | 3,000 | 3,600 | 0.75× → 0.90× | 900 → 800 B (3.00× → 2.67×) | 3,600 |",
		"The hot aggregate's bound",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "COPY") {
		t.Errorf("table has COPY rows without COPY cases:\n%s", table)
	}
}

func TestProducerTable_CopyRowsPerEventAgainstPlainCopy(t *testing.T) {
	t.Parallel()
	r := producerResults()
	add := func(name, schema string, perTx int, txPerSec, walPerTx float64) {
		r.Producers = append(r.Producers, producerCase{Name: name, Schema: schema, PerTx: perTx,
			Rounds: []float64{txPerSec}, TxPerSec: txPerSec, WALPerTx: walPerTx,
			EventsPerSec: txPerSec * float64(perTx), WALPerEvent: walPerTx / float64(perTx)})
	}
	add("copy-plain", "", 100, 500, 20000)
	add("copy-unordered", "before", 100, 200, 60000)
	add("copy-unordered", "after", 100, 250, 50000)
	add("copy-ordered", "before", 100, 100, 90000)
	add("copy-ordered", "after", 100, 125, 80000)
	add("copy-plain", "", 1000, 60, 200000)
	add("copy-unordered", "after", 1000, 30, 500000) // no before: "—"
	if !r.hasProducerCopy() {
		t.Fatal("hasProducerCopy = false")
	}
	lines := producerTable(r)
	table := strings.Join(lines, "\n")
	for _, want := range []string{
		"| outbox, unordered, no relay waiting (relays busy, or none) | 3,000 | 3,200 |", // the one-INSERT rows stay
		"| COPY, one per transaction | events/s before | events/s after | vs plain COPY, before → after | WAL per event, before → after | rounds after (events/s) |",
		"| COPY, 100 events per transaction: plain table, primary key only | 50,000 | 50,000 | 1× | 200 B | 50,000 |",
		"| COPY, 100 events per transaction: outbox (`EnqueueMany`), unordered | 20,000 | 25,000 | 0.40× → 0.50× | 600 → 500 B (3.00× → 2.50×) | 25,000 |",
		"| COPY, 100 events per transaction: outbox (`EnqueueMany`), ordered, distinct aggregates | 10,000 | 12,500 | 0.20× → 0.25× | 900 → 800 B (4.50× → 4.00×) | 12,500 |",
		"| COPY, 1,000 events per transaction: plain table, primary key only | 60,000 | 60,000 | 1× | 200 B | 60,000 |",
		"| COPY, 1,000 events per transaction: outbox (`EnqueueMany`), unordered | — | 30,000 | — → 0.50× | — → 500 B (— → 2.50×) | 30,000 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "COPY, 1,000 events per transaction: outbox (`EnqueueMany`), ordered") {
		t.Errorf("table has a row for a case not measured:\n%s", table)
	}
}
