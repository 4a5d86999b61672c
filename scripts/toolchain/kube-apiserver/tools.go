//go:build tools

// Package tools pins kube-apiserver, the Kubernetes API server scripts/setup.sh builds into the cache
// (tests/helpers/kube-apiserver.ts starts it, with Debian's etcd, so every object a kubernetes tenant renders
// is validated by a real API server with server-side dry-run). go.mod/go.sum fix every dependency.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
