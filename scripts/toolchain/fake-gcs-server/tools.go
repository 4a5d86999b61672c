//go:build tools

// Package tools pins fake-gcs-server, the GCS API emulator scripts/setup.sh builds into the cache
// (tests/helpers/fake-gcs.ts starts it for the tests against a real GCS API). go.mod/go.sum fix every
// dependency.
package tools

import _ "github.com/fsouza/fake-gcs-server"
