#!/usr/bin/env bash
# Prepares the toolchain: npm dependencies, the Pulumi CLI (pinned in scripts/toolchain/go.mod) and the
# project's provider plugins. Idempotent; what it builds is cached outside the repo, so a second run
# takes seconds. Needs no root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

step "Node.js"
command -v node >/dev/null || die "Node.js is not installed: install Node.js >= 20.19 (Debian: apt-get install nodejs npm)"
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' ||
  die "Node.js $(node --version) is too old: this project needs >= 20.19"
ok "node $(node --version), npm $(npm --version 2>/dev/null)"

step "npm dependencies"
lock_hash=$(sha256sum "$root/package-lock.json" | cut -c1-16)
if [ -f "$root/node_modules/.agent-sandbox-lock" ] && [ "$(cat "$root/node_modules/.agent-sandbox-lock")" = "$lock_hash" ]; then
  ok "up to date"
else
  (cd "$root" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_hash" >"$root/node_modules/.agent-sandbox-lock"
  ok "installed from package-lock.json"
fi

step "Pulumi CLI"
version=$(pulumi_pinned_version)
dir=$(pulumi_cache_dir)
mkdir -p "$dir/bin"
# The project's build (the CLI's zxcvbn-go lists loaded when first used, not at every start:
# scripts/toolchain/pulumi-lazy-zxcvbn.sh) is stamped; a CLI of the pinned version without the stamp (an
# earlier build, Pulumi's own distribution) is rebuilt where there is Go, and used as it is where there is none.
pulumi_stamp=$(cat "$root/scripts/toolchain/go.sum" "$root/scripts/toolchain/pulumi-lazy-zxcvbn.sh" | sha256sum | cut -c1-16)
if [ "$(pulumi_version_of "$dir/bin/pulumi")" = "v$version" ] &&
  { [ "$(cat "$dir/bin/.pulumi.stamp" 2>/dev/null)" = "$pulumi_stamp" ] || ! command -v go >/dev/null; }; then
  ok "v$version (cached at $dir/bin/pulumi)"
elif installed=$(command -v pulumi) && [ "$(pulumi_version_of "$installed")" = "v$version" ]; then
  ln -sf "$installed" "$dir/bin/pulumi"
  ok "v$version (installed at $installed)"
else
  if ! command -v go >/dev/null; then
    die "the Pulumi CLI v$version is not installed and there is no Go toolchain to build it. Either install
  Pulumi: curl -fsSL https://get.pulumi.com | sh -s -- --version $version   (https://www.pulumi.com/docs/install/)
  or Go >= $(go_required_version): https://go.dev/doc/install"
  fi
  say "building v$version from Go modules into $dir (first time only; ~6 min on 2 cores)"
  rm -rf "$dir/src" && mkdir -p "$dir/src"
  cp "$root/scripts/toolchain/go.mod" "$root/scripts/toolchain/go.sum" "$root/scripts/toolchain/tools.go" "$dir/src/"
  started=$(date +%s)
  bash "$root/scripts/toolchain/pulumi-lazy-zxcvbn.sh" "$dir/src" "$dir/lazy-modules" ||
    say "building without the lazy zxcvbn-go lists (above): every CLI start decodes them"
  (cd "$dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$dir/bin/pulumi.partial" \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$version" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) ||
    die "building the Pulumi CLI failed (see above); the Go module proxy must serve github.com/pulumi/pulumi/pkg/v3@v$version"
  mv "$dir/bin/pulumi.partial" "$dir/bin/pulumi"
  echo "$pulumi_stamp" >"$dir/bin/.pulumi.stamp"
  ok "built v$version in $(($(date +%s) - started)) s"
fi

step "Node.js language host"
# `pulumi up` of a program directory (the platform stack) starts pulumi-language-nodejs. Pulumi's own is a
# Go module the module proxy does not serve, so the project's (scripts/toolchain/pulumi-language-nodejs) is
# built in the same pinned module as the CLI; the stamp rebuilds it when its source or pins change.
langhost_stamp=$( (cat "$root/scripts/toolchain/go.sum" "$root/scripts/toolchain/pulumi-language-nodejs/main.go"; echo "$version") | sha256sum | cut -c1-16)
if [ -x "$dir/bin/pulumi-language-nodejs" ] && [ "$(cat "$dir/bin/.pulumi-language-nodejs.stamp" 2>/dev/null)" = "$langhost_stamp" ]; then
  ok "cached at $dir/bin/pulumi-language-nodejs"
elif ! command -v go >/dev/null && [ -x "$dir/bin/pulumi-language-nodejs" ] && [ ! -f "$dir/bin/.pulumi-language-nodejs.stamp" ] &&
  "$dir/bin/pulumi-language-nodejs" --help >/dev/null 2>&1; then
  # Pulumi's own distribution (get.pulumi.com, as the GCP host's startup script installs it) ships its language
  # host beside the CLI, and that host has no Go: use it.
  ok "Pulumi's own, installed with the CLI at $dir/bin/pulumi-language-nodejs"
else
  command -v go >/dev/null || die "building pulumi-language-nodejs needs Go >= $(go_required_version): https://go.dev/doc/install"
  rm -rf "$dir/langhost-src" && mkdir -p "$dir/langhost-src"
  cp -r "$root/scripts/toolchain/go.mod" "$root/scripts/toolchain/go.sum" "$root/scripts/toolchain/tools.go" \
    "$root/scripts/toolchain/pulumi-language-nodejs" "$dir/langhost-src/"
  started=$(date +%s)
  (cd "$dir/langhost-src" && GOFLAGS=-mod=readonly go build -trimpath -o "$dir/bin/pulumi-language-nodejs.partial" \
    -ldflags "-s -w -X main.version=$version" ./pulumi-language-nodejs) ||
    die "building pulumi-language-nodejs failed (see above)"
  mv "$dir/bin/pulumi-language-nodejs.partial" "$dir/bin/pulumi-language-nodejs"
  echo "$langhost_stamp" >"$dir/bin/.pulumi-language-nodejs.stamp"
  ok "built in $(($(date +%s) - started)) s"
fi

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

step "provider plugins"
# A real pulumi-command provider found on PATH is preferred to the project's TypeScript build of
# command:local:Command, which exists because the Go module proxy serves no pulumi-command version.
if real=$(command -v pulumi-resource-command) && [ "$real" != "$root/bin/pulumi-resource-command" ]; then
  ln -sf "$real" "$dir/bin/pulumi-resource-command"
  ok "pulumi-resource-command: $real"
else
  rm -f "$dir/bin/pulumi-resource-command"
  ok "pulumi-resource-command: $root/bin/pulumi-resource-command (TypeScript, command:local:Command)"
fi
(cd "$root" && node --import tsx scripts/bundles.ts >/dev/null) || die "bundling the plugins and the runtime failed (see above)"
ok "pulumi-resource-sandbox: $root/bin/pulumi-resource-sandbox; the runtime: $root/dist/runtime/main.mjs"

step "web console"
# dist/web is what the runtime serves at /; rebuilt only when web/'s sources or the locked packages change.
web_stamp=$(bash "$root/scripts/web-stamp.sh")
if [ -f "$root/dist/web/index.html" ] && [ "$(cat "$root/dist/.web-source-stamp" 2>/dev/null)" = "$web_stamp" ]; then
  ok "up to date ($root/dist/web)"
else
  (cd "$root" && npm run --silent build:web) || die "building the web console failed (see above)"
  echo "$web_stamp" >"$root/dist/.web-source-stamp"
  ok "built into $root/dist/web"
fi

step "toolchain ready"
say "PATH for Pulumi: $dir/bin:$root/bin"
