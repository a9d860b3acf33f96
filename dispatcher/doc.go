// Package dispatcher is pgoutbox's runtime: producers' Enqueue inside the
// business transaction, and the dispatch loop that claims messages under a
// lease, publishes them outside any transaction, and finalizes them with
// fenced writes (WHERE id = ? AND status = 'processing' AND lease_version = ?).
//
// The package calls only the generated db package; the SQL it runs is the
// annotated queries/ folder.
package dispatcher
