package dispatcher

import "testing"

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
