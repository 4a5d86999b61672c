#!/usr/bin/env bash
# Builds the tools only the tests use, each from its wrapper module under scripts/toolchain/ and cached outside
# the repo by version (scripts/setup.sh runs it, or `npm test` in the background beside the rest of its
# set-up: scripts/test.sh). With AGENT_SANDBOX_SKIP_TEST_TOOLS (`npm run local`) each is skipped, but Pulumi's
# Kubernetes provider where the stack's config names a cluster. Needs no root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

step "actionlint"
# Lints .github/workflows (tests/integration/workflows.test.ts only). Its own wrapper module, so a new
# actionlint never changes the Pulumi build's inputs; cached by version like the CLI.
actionlint_version=$(actionlint_pinned_version)
actionlint_dir=$(actionlint_cache_dir)
actionlint_version_of() { [ -x "$1" ] && "$1" -version 2>/dev/null | head -n 1 || true; }
if [ "$(actionlint_version_of "$actionlint_dir/bin/actionlint")" = "v$actionlint_version" ]; then
  ok "v$actionlint_version (cached at $actionlint_dir/bin/actionlint)"
elif installed=$(command -v actionlint) && [ "$(actionlint_version_of "$installed")" = "v$actionlint_version" ]; then
  mkdir -p "$actionlint_dir/bin" && ln -sf "$installed" "$actionlint_dir/bin/actionlint"
  ok "v$actionlint_version (installed at $installed)"
elif [ -n "${AGENT_SANDBOX_SKIP_TEST_TOOLS:-}" ]; then
  ok "skipped: only the tests use it (npm test builds it)"
elif ! command -v go >/dev/null; then
  # Only the test suite needs it: running the platform must not require Go for it.
  say "skipped: no Go toolchain to build actionlint v$actionlint_version (the workflow tests need it; install Go >= $(go_required_version))"
else
  say "building v$actionlint_version from Go modules into $actionlint_dir (first time only; ~1 min)"
  rm -rf "$actionlint_dir/src" && mkdir -p "$actionlint_dir/src" "$actionlint_dir/bin"
  cp "$root/scripts/toolchain/actionlint/go.mod" "$root/scripts/toolchain/actionlint/go.sum" \
    "$root/scripts/toolchain/actionlint/tools.go" "$actionlint_dir/src/"
  started=$(date +%s)
  # Built inside a wrapper module, actionlint would report the wrapper's version ("(devel)"): set its own.
  (cd "$actionlint_dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$actionlint_dir/bin/actionlint.partial" \
    -ldflags "-s -w -X github.com/rhysd/actionlint.version=v$actionlint_version" \
    github.com/rhysd/actionlint/cmd/actionlint) ||
    die "building actionlint failed (see above); the Go module proxy must serve github.com/rhysd/actionlint@v$actionlint_version"
  mv "$actionlint_dir/bin/actionlint.partial" "$actionlint_dir/bin/actionlint"
  ok "built v$actionlint_version in $(($(date +%s) - started)) s"
fi

# A test-only tool from its wrapper module scripts/toolchain/MODULE, built into DIR/bin and cached there with a
# stamp of the module's go.sum, which tells a cached build from a stale one (most of these print no version).
# Usage: stamped_go_tool NAME VERSION DIR MODULE BINARY LDFLAGS HOW_LONG PACKAGE...
stamped_go_tool() {
  local name=$1 version=$2 dir=$3 module=$4 binary=$5 ldflags=$6 how_long=$7 stamp started
  shift 7
  stamp=$(sha256sum "$root/scripts/toolchain/$module/go.sum" | cut -c1-16)
  if [ -x "$dir/bin/$binary" ] && [ "$(cat "$dir/bin/.stamp" 2>/dev/null)" = "$stamp" ]; then
    ok "v$version (cached at $dir/bin)"
  elif [ -n "${AGENT_SANDBOX_SKIP_TEST_TOOLS:-}" ]; then
    ok "skipped: only the tests use it (npm test builds it)"
  elif ! command -v go >/dev/null; then
    say "skipped: no Go toolchain to build $name v$version (the tests need it; install Go >= $(go_required_version "$root/scripts/toolchain/$module/go.mod"))"
  else
    say "building $name v$version from Go modules into $dir (first time only; $how_long)"
    rm -rf "$dir/src" "$dir/bin.partial" && mkdir -p "$dir/src" "$dir/bin.partial"
    cp "$root/scripts/toolchain/$module/go.mod" "$root/scripts/toolchain/$module/go.sum" \
      "$root/scripts/toolchain/$module/tools.go" "$dir/src/"
    started=$(date +%s)
    (cd "$dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$dir/bin.partial/" -ldflags "$ldflags" "$@") ||
      die "building $name failed (see above); the Go module proxy must serve what scripts/toolchain/$module/go.mod requires"
    echo "$stamp" >"$dir/bin.partial/.stamp"
    rm -rf "${dir:?}/bin" && mv "$dir/bin.partial" "$dir/bin"
    ok "built v$version in $(($(date +%s) - started)) s"
  fi
}

step "fake-gcs-server"
# The GCS API the tests run the GCP target's storage paths against (tests/helpers/fake-gcs.ts): the tenant
# stacks' gs:// state, backups, the purge on delete.
stamped_go_tool fake-gcs-server "$(fake_gcs_pinned_version)" "$(fake_gcs_cache_dir)" fake-gcs-server \
  fake-gcs-server "-s -w" "~2 min on 2 cores" github.com/fsouza/fake-gcs-server

step "pebble"
# An ACME server for the tests (tests/helpers/pebble.ts): the GCP front door's Caddy gets its certificates from it
# as it would from Let's Encrypt, the challenges answered on loopback and names resolved by its DNS stand-in.
stamped_go_tool pebble "$(pebble_pinned_version)" "$(pebble_cache_dir)" pebble pebble "-s -w" "~30 s on 2 cores" \
  github.com/letsencrypt/pebble/v2/cmd/pebble github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv

step "kubernetes control plane"
# The cluster the kubernetes backend is tested against (tests/helpers/kube-apiserver.ts, with Debian's etcd):
# kube-apiserver validates every object a tenant renders (server-side dry-run); with kube-controller-manager,
# kube-scheduler and kwok's fake node, the runtime's Kubernetes paths run against Pods that are made, scheduled,
# exec'd into and deleted. One wrapper module (k8s.io/kubernetes plus a pin of each staging module it replaces
# with a local path) and one `go build`, so the three share their compile. Outside its own repository's build
# scripts the version would read v0.0.0-master: the ldflags set the pinned one.
kubernetes_version=$(kubernetes_pinned_version)
stamped_go_tool "kube-apiserver, kube-controller-manager and kube-scheduler" "$kubernetes_version" \
  "$(kubernetes_cache_dir)" kubernetes kube-scheduler \
  "-s -w -X k8s.io/component-base/version.gitVersion=v$kubernetes_version" \
  "5 to 10 min on 2 cores, 2.4 GiB of memory" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

step "kubelet"
# One real node for the tests' cluster (tests/helpers/kube-node.ts): the kubelet, at the control plane's version,
# with a containerd of its own (Debian's) and Debian's CNI plugins, runs a Pod of the sandbox image for real where
# kwok runs an exec as a process on the host (scripts/test.sh adds its pause binary and the CNI plugins).
kubelet_version=$(kubelet_pinned_version)
[ "$kubelet_version" = "$kubernetes_version" ] ||
  die "scripts/toolchain/kubelet pins k8s.io/kubernetes v$kubelet_version, the control plane v$kubernetes_version: a node must not be newer than its API server, and the tests' node is of the same version"
stamped_go_tool kubelet "$kubelet_version" "$(kubelet_cache_dir)" kubelet kubelet \
  "-s -w -X k8s.io/component-base/version.gitVersion=v$kubelet_version" \
  "3 to 6 min on 2 cores beside the control plane's cached build" \
  k8s.io/kubernetes/cmd/kubelet

step "kwok"
# The fake kubelet of the tests' cluster: it makes a node Ready, runs the Pods bound to it, and serves their
# exec with local processes.
stamped_go_tool kwok "$(kwok_pinned_version)" "$(kwok_cache_dir)" kwok kwok "-s -w" "~2 min on 2 cores" \
  sigs.k8s.io/kwok/cmd/kwok

step "Pulumi's Kubernetes provider"
# kubernetes tenant stacks apply their objects through it (docs/kubernetes.md, "Pulumi's Kubernetes provider").
# The Go module proxy serves it only at a pseudo-version, and its own command embeds two generated files the
# module's zip lacks, so the project's main (scripts/toolchain/pulumi-kubernetes/main.go) embeds the module's
# schema.json and terraform-mapping.json, copied beside it here, and the version is the @pulumi/kubernetes
# release package.json pins (the one whose schema that commit serves: tests/integration/kubernetes-provider.test.ts
# compares them). `npm run local` builds it only when the stack's config declares a cluster.
k8s_provider_version=$(pulumi_kubernetes_sdk_version)
k8s_provider_module=$(pulumi_kubernetes_module_version)
k8s_provider_dir=$(pulumi_kubernetes_cache_dir)
k8s_provider_stamp=$( (cat "$root/scripts/toolchain/pulumi-kubernetes/go.sum" "$root/scripts/toolchain/pulumi-kubernetes/main.go"
  echo "$k8s_provider_version") | sha256sum | cut -c1-16)
if [ -x "$k8s_provider_dir/bin/pulumi-resource-kubernetes" ] && [ "$(cat "$k8s_provider_dir/bin/.stamp" 2>/dev/null)" = "$k8s_provider_stamp" ]; then
  ok "v$k8s_provider_version (cached at $k8s_provider_dir/bin)"
elif [ -n "${AGENT_SANDBOX_SKIP_TEST_TOOLS:-}" ] &&
  ! grep -qs "kubernetes:" "$root/Pulumi.${AGENT_SANDBOX_STACK:-dev}.yaml"; then
  ok "skipped: no cluster in Pulumi.${AGENT_SANDBOX_STACK:-dev}.yaml (kubernetes projects need it)"
elif ! command -v go >/dev/null; then
  say "skipped: no Go toolchain to build it (kubernetes projects need it; install Go >= $(go_required_version "$root/scripts/toolchain/pulumi-kubernetes/go.mod"))"
else
  say "building v$k8s_provider_version ($k8s_provider_module) from Go modules into $k8s_provider_dir (first time only; ~7 min on 2 cores)"
  rm -rf "$k8s_provider_dir/src" "$k8s_provider_dir/bin.partial" && mkdir -p "$k8s_provider_dir/src" "$k8s_provider_dir/bin.partial"
  cp "$root/scripts/toolchain/pulumi-kubernetes/go.mod" "$root/scripts/toolchain/pulumi-kubernetes/go.sum" \
    "$root/scripts/toolchain/pulumi-kubernetes/main.go" "$k8s_provider_dir/src/"
  started=$(date +%s)
  module_dir=$(cd "$k8s_provider_dir/src" && GOFLAGS=-mod=readonly go mod download -json \
    "github.com/pulumi/pulumi-kubernetes/provider/v4@$k8s_provider_module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
    die "the Go module proxy must serve github.com/pulumi/pulumi-kubernetes/provider/v4@$k8s_provider_module"
  cp "$module_dir/cmd/pulumi-resource-kubernetes/schema.json" \
    "$module_dir/cmd/pulumi-resource-kubernetes/terraform-mapping.json" "$k8s_provider_dir/src/"
  (cd "$k8s_provider_dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$k8s_provider_dir/bin.partial/pulumi-resource-kubernetes" \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$k8s_provider_version" .) ||
    die "building Pulumi's Kubernetes provider failed (see above)"
  echo "$k8s_provider_stamp" >"$k8s_provider_dir/bin.partial/.stamp"
  rm -rf "${k8s_provider_dir:?}/bin" && mv "$k8s_provider_dir/bin.partial" "$k8s_provider_dir/bin"
  rm -rf "$k8s_provider_dir/src"
  ok "built v$k8s_provider_version in $(($(date +%s) - started)) s"
fi

