//go:build ignore

// This file documents how pgoutbox pins its code generator; the ignore build
// tag keeps it out of every build and out of `go mod tidy`.
//
// sqlc is pinned in a separate module file, tools.mod (with tools.sum), as a
// `tool` directive, and run with
//
//	go tool -modfile=tools.mod sqlc generate
//
// (`make generate`, `make verify`). The main go.mod therefore lists only
// what the library and the CLI import: an application that imports
// pgoutbox's dispatcher inherits no sqlc, SQL parser or wasm runtime
// requirements. `make verify` checks that both files are tidy.
//
// goose's CLI is deliberately not pinned: it would pull every database
// driver in. Migrations run through migrations.Up / the pgoutbox CLI.
package tools
