// Package inboxqueries embeds the inbox's annotated SQL (the *.sql files
// sqlc compiles into package db/inboxdb), so that `pgoutbox inbox init` can
// copy it into a team's own sqlc project under another table name.
package inboxqueries

import "embed"

// FS holds every *.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS
