//go:build tools

// Package tools pins the Kubernetes control plane scripts/setup.sh builds into the cache: kube-apiserver,
// kube-controller-manager and kube-scheduler, from one module so their shared packages compile once.
// tests/helpers/kube-apiserver.ts starts them with Debian's etcd (and kwok, scripts/toolchain/kwok, for a node):
// every object a kubernetes tenant renders is validated by a real API server, and the runtime's Kubernetes paths
// run against a cluster whose controllers make, schedule and delete its Pods. go.mod/go.sum fix every dependency.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
