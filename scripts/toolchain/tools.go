//go:build tools

// Package tools pins the Pulumi CLI built by scripts/setup.sh; go.mod/go.sum fix every dependency.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
