package dispatcher

import (
	"testing"
	"time"
)

// Which kind claims first next round: turns, except that a kind that came
// back empty while the other claimed goes last, and a kind that was not
// asked (no room) gets its turn.
func TestNextOrderedFirst(t *testing.T) {
	uo := []ClaimMode{ClaimUnorderedOnly, ClaimOrderedOnly}
	ou := []ClaimMode{ClaimOrderedOnly, ClaimUnorderedOnly}
	for _, tc := range []struct {
		name  string
		kinds []ClaimMode
		got   [2]int
		want  bool // ordered first next round
	}{
		{"both claimed: turns (unordered went first)", uo, [2]int{2000, 10}, true},
		{"both claimed: turns (ordered went first)", ou, [2]int{10, 2000}, false},
		{"unordered backlog, ordered empty, ordered went last", uo, [2]int{2000, 0}, false},
		{"unordered backlog, ordered empty, ordered went first", ou, [2]int{0, 2000}, false},
		{"ordered backlog, unordered empty", uo, [2]int{0, 500}, true},
		{"ordered backlog, unordered empty, ordered went first", ou, [2]int{500, 0}, true},
		{"no room for the second: it goes first next", uo, [2]int{2000, -1}, true},
		{"no room for the second (unordered): it goes first next", ou, [2]int{64, -1}, false},
		{"idle: turns", uo, [2]int{0, 0}, true},
		{"idle: turns back", ou, [2]int{0, 0}, false},
		{"first failed: turns", uo, [2]int{-1, -1}, true},
	} {
		if got := nextOrderedFirst(tc.kinds, tc.got); got != tc.want {
			t.Errorf("%s: nextOrderedFirst(%v, %v) = %v, want %v", tc.name, tc.kinds, tc.got, got, tc.want)
		}
	}
}

// A kind that came back empty while the other claimed is left out of the
// rounds for kindRecheck, unless a wake-up came meanwhile; a round that
// claimed nothing ends every skip (and says to claim again at once when it
// had left a kind out).
func TestEmptyKinds(t *testing.T) {
	uo := []ClaimMode{ClaimUnorderedOnly, ClaimOrderedOnly}
	ou := []ClaimMode{ClaimOrderedOnly, ClaimUnorderedOnly}
	t0 := time.Unix(100, 0)
	var e emptyKinds
	if e.skip(ClaimOrderedOnly, t0, 0) || e.skip(ClaimUnorderedOnly, t0, 0) {
		t.Fatal("a new dispatcher skips a kind")
	}
	// An unordered backlog; the ordered claim came back empty.
	if e.record(uo, [2]int{2000, 0}, t0, 7) {
		t.Fatal("a round that claimed asks again at once")
	}
	if !e.skip(ClaimOrderedOnly, t0.Add(kindRecheck-time.Millisecond), 7) {
		t.Error("the empty ordered kind is asked again before kindRecheck")
	}
	if e.skip(ClaimUnorderedOnly, t0.Add(time.Millisecond), 7) {
		t.Error("the kind that claimed is skipped")
	}
	if e.skip(ClaimOrderedOnly, t0.Add(time.Millisecond), 8) {
		t.Error("a wake-up since does not end the skip")
	}
	if e.skip(ClaimOrderedOnly, t0.Add(kindRecheck), 7) {
		t.Error("the ordered kind is still skipped after kindRecheck")
	}
	// Skipped rounds keep the skip; asked again and still empty re-arms it.
	e.record(uo, [2]int{2000, -1}, t0.Add(10*time.Millisecond), 7)
	if !e.skip(ClaimOrderedOnly, t0.Add(20*time.Millisecond), 7) {
		t.Error("a round that left the kind out ended its skip")
	}
	t1 := t0.Add(kindRecheck)
	e.record(ou, [2]int{0, 2000}, t1, 9)
	if !e.skip(ClaimOrderedOnly, t1.Add(kindRecheck-time.Millisecond), 9) {
		t.Error("asked again and empty again: the skip is not re-armed from then")
	}
	// The ordered kind claims: asked every round again.
	e.record(ou, [2]int{5, 2000}, t1.Add(time.Millisecond), 9)
	if e.skip(ClaimOrderedOnly, t1.Add(2*time.Millisecond), 9) {
		t.Error("a kind that claimed is still skipped")
	}
	// A round that claimed nothing while a kind was left out: claim again
	// at once, with both kinds.
	e.record(uo, [2]int{2000, 0}, t1, 9)
	if again := e.record(uo, [2]int{0, -1}, t1.Add(time.Millisecond), 9); !again {
		t.Error("a round that claimed nothing but skipped a kind lets the claimer wait")
	}
	if e.skip(ClaimOrderedOnly, t1.Add(2*time.Millisecond), 9) {
		t.Error("after an empty round a kind is still skipped")
	}
	if again := e.record(uo, [2]int{0, 0}, t1.Add(3*time.Millisecond), 9); again {
		t.Error("an idle round with nothing skipped asks again at once")
	}
}
