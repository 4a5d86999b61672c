//go:build tools

// Package tools pins kwok, the fake kubelet scripts/setup.sh builds into the cache: it makes a node of the
// tests' cluster Ready, runs the Pods the scheduler binds to it (tests/helpers/kwok-stages.yaml), and answers the
// API server's exec requests with local processes, so the runtime's exec and terminal reach a real PTY through
// the Kubernetes API (tests/helpers/kube-apiserver.ts). go.mod/go.sum fix every dependency.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
