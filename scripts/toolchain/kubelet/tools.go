//go:build tools

// Package tools pins the kubelet scripts/setup.sh builds into the cache, at the control plane's version
// (scripts/toolchain/kubernetes, whose replace list this module repeats): tests/helpers/kube-node.ts runs it with
// a containerd of its own as one real node of the tests' cluster, where a kubernetes tenant's Pod runs the
// sandbox image for real (kwok's node runs a Pod's exec as a process on the host). A module of its own so the
// control plane's build stays cached where it is. go.mod/go.sum fix every dependency.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
