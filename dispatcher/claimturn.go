package dispatcher

import "time"

// Which kinds a claim round asks, and in which order (ClaimAll). A drain of
// one kind used to ask the other kind every round as well: an
// OutboxClaimSnapshot and an empty window claim, 2-4 ms on the claim's
// critical path of a round of about 25 ms.

// nextOrderedFirst says which kind claims first in the round after one that
// claimed got of kinds (claimRound's result). The kinds take turns, so that
// neither waits behind the other's claim every round; but a kind that was
// asked and claimed nothing while the other claimed goes last. Turns alone
// put a backlog of one kind behind the other kind's empty claim every other
// round, and behind two of them in a row (last in one round, first in the
// next): 2-4 ms each on the claim's critical path of a drain. A kind not asked (-1: no room in flight) keeps its turn, so a
// backlog of one kind that fills every round cannot starve the other.
func nextOrderedFirst(kinds []ClaimMode, got [2]int) bool {
	switch {
	case got[0] == 0 && got[1] > 0:
		return kinds[1] == ClaimOrderedOnly
	case got[1] == 0 && got[0] > 0:
		return kinds[0] == ClaimOrderedOnly
	default:
		return kinds[0] != ClaimOrderedOnly // take turns
	}
}

// kindRecheck is how long a kind whose claim came back empty, while the
// other kind's claim did not, is left out of the rounds: a message of that
// kind committed meanwhile waits at most this long on a busy dispatcher
// (or not at all: any wake-up, a NOTIFY or an ordered finalize's hand-off,
// asks it again in the next round). An idle dispatcher asks both kinds
// every round.
const kindRecheck = 50 * time.Millisecond

// emptyKinds remembers, per kind, since when it came back empty while the
// other kind claimed (zero: it is asked every round), and the dispatcher's
// wake-up count then.
type emptyKinds struct {
	since [2]time.Time
	wakes [2]int64
}

func kindIndex(k ClaimMode) int {
	if k == ClaimOrderedOnly {
		return 1
	}
	return 0
}

// skip says whether the next round may leave kind out.
func (e *emptyKinds) skip(kind ClaimMode, now time.Time, wakes int64) bool {
	i := kindIndex(kind)
	return !e.since[i].IsZero() && now.Sub(e.since[i]) < kindRecheck && wakes == e.wakes[i]
}

// record takes a round's result (claimRound's got for kinds). It returns
// true when the round claimed nothing but left a kind out: the claimer must
// not wait as if idle, it asks again at once (with both kinds: a round that
// claimed nothing ends every skip).
func (e *emptyKinds) record(kinds []ClaimMode, got [2]int, now time.Time, wakes int64) (again bool) {
	if got[0] <= 0 && got[1] <= 0 {
		again = !e.since[0].IsZero() || !e.since[1].IsZero()
		*e = emptyKinds{}
		return again
	}
	for i, kind := range kinds {
		k := kindIndex(kind)
		switch other := got[1-i]; {
		case got[i] < 0:
			// Not asked: as it was.
		case got[i] == 0 && other > 0:
			e.since[k], e.wakes[k] = now, wakes
		default:
			e.since[k] = time.Time{}
		}
	}
	return false
}
