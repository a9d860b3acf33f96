//go:build tools

// Package tools pins the code generator so `make generate` runs the version
// recorded in go.mod through `go run`, with no global install.
//
// goose's CLI is deliberately not pinned here: it would pull every database
// driver into go.mod. Migrations run through migrations.Up / the pgoutbox CLI.
package tools

import (
	_ "github.com/sqlc-dev/sqlc/cmd/sqlc"
)
