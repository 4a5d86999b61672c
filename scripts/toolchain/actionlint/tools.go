//go:build tools

// Package tools pins actionlint, the GitHub Actions workflow linter scripts/setup.sh builds into the cache
// (tests/integration/workflows.test.ts runs it on .github/workflows). go.mod/go.sum fix every dependency.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
