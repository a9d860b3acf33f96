// Package queries embeds the annotated SQL contract (the *.sql files sqlc
// compiles into package db), so that `pgoutbox init` can copy it into a
// team's own sqlc project under another table name.
package queries

import "embed"

// FS holds every *.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS
