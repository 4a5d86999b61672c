//go:build tools

// Package tools pins Pebble, Let's Encrypt's small ACME test server, and its challenge test server, which
// scripts/setup.sh builds into the cache (tests/helpers/pebble.ts starts them for the front door's ACME test).
// go.mod/go.sum fix every dependency.
package tools

import (
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble"
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv"
)
