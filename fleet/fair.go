package fleet

import (
	"context"
	"sync"
)

// fairLimit is the fleet's one limit on publishes in flight, divided among
// the databases that want slots: a freed slot goes to the next database in
// turn that has a publish waiting (round robin over databases, not over
// waiting publishes). A database with a backlog of a million therefore
// waits its turn like a database with one event: the quiet database's
// publish starts after at most one slot release per other waiting
// database, however many publishes the busy one has queued.
type fairLimit struct {
	mu   sync.Mutex
	free int
	turn []*share // databases with a publish waiting, in the order of their turns
}

func newFairLimit(n int) *fairLimit { return &fairLimit{free: n} }

// share is one database's access to the fleet's limit: a dispatcher.Limiter.
type share struct {
	l       *fairLimit
	waiting []chan struct{} // FIFO within the database
	queued  bool            // in l.turn
	held    int             // slots held now (Stats)
}

func (l *fairLimit) share() *share { return &share{l: l} }

// Acquire waits for a slot: at once when one is free and no database is
// waiting, else at the share's turn.
func (s *share) Acquire(ctx context.Context) error {
	l := s.l
	l.mu.Lock()
	if l.free > 0 && len(l.turn) == 0 {
		l.free--
		s.held++
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1)
	s.waiting = append(s.waiting, ch)
	if !s.queued {
		s.queued = true
		l.turn = append(l.turn, s)
	}
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range s.waiting {
		if w == ch {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			if len(s.waiting) == 0 {
				s.dequeue()
			}
			return ctx.Err()
		}
	}
	// Granted while ctx ended: give the slot on.
	s.held--
	l.grant()
	return ctx.Err()
}

// Release gives a slot back: to the next database in turn, if any waits.
func (s *share) Release() {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	s.held--
	l.grant()
}

// grant hands one slot to the head of the turn (l.mu held), or frees it.
func (l *fairLimit) grant() {
	if len(l.turn) == 0 {
		l.free++
		return
	}
	s := l.turn[0]
	l.turn = l.turn[1:]
	ch := s.waiting[0]
	s.waiting = s.waiting[1:]
	s.held++
	if len(s.waiting) > 0 {
		l.turn = append(l.turn, s) // its next publish waits for its next turn
	} else {
		s.queued = false
	}
	ch <- struct{}{}
}

// dequeue takes s out of the turn (l.mu held).
func (s *share) dequeue() {
	s.queued = false
	for i, t := range s.l.turn {
		if t == s {
			s.l.turn = append(s.l.turn[:i], s.l.turn[i+1:]...)
			return
		}
	}
}

// inUse is how many slots s holds.
func (s *share) inUse() int {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.held
}
