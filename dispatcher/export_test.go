package dispatcher

// BusyWish reports what the claimer last asked of the idle lock (busy.go):
// busy, the lock given up (it claims back to back), or not (it waits, or is
// full in flight: producers must notify); and whether the listener has
// acted on every wish so far. Once the claimer stops changing its wish,
// synced means the lock is given up, or held, or being taken again.
func BusyWish(d *Dispatcher) (busy, synced bool) {
	return d.busy.want.Load(), d.busy.listening.Load() && d.busy.synced.Load() == d.busy.wishes.Load()
}
