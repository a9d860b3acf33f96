package dispatcher

// Wake asks the claimer for a claim round now, as a notification would but
// without the wake window's short polls after it (Config.WakeWindow). It is
// the entry point of a wake-up source other than the dispatcher's own LISTEN
// connection: a poll schedule that adapts to each database's traffic, or a
// probe that watches many databases at once (package fleet does both, with
// Config.DisableListen set). Calls coalesce; safe from any goroutine, before
// Run (the first round claims anyway) or while it runs.
func (d *Dispatcher) Wake() { d.wakeUp() }
