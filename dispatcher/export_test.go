package dispatcher

// BusyWish reports what the claimer last asked of the idle lock (busy.go):
// busy, the lock given up (it claims back to back), or not (it waits, or is
// full in flight: producers must notify); and whether the listener has
// acted on every wish so far. Once the claimer stops changing its wish,
// synced means the lock is given up, or held, or being taken again.
func BusyWish(d *Dispatcher) (busy, synced bool) {
	return d.busy.want.Load(), d.busy.listening.Load() && d.busy.synced.Load() == d.busy.wishes.Load()
}

// IdleListening reports that the claimer waits idle (a full PollInterval,
// outside a wake window) in a wait it began with LISTEN registered, and that
// no wake-up has come since before its last claim round, which found
// nothing: from then on only a notification, or the poll interval, makes it
// claim again. Stats().IdleWaits cannot tell this: a test that reads it
// after LISTEN may already count the wait it means to wait for.
func IdleListening(d *Dispatcher) bool {
	w := d.idleWakes.Load()
	return w != 0 && d.wakes.Load() == w-1
}
