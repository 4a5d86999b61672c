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
if [ "$(pulumi_version_of "$dir/bin/pulumi")" = "v$version" ]; then
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
  (cd "$dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$dir/bin/pulumi.partial" \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$version" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) ||
    die "building the Pulumi CLI failed (see above); the Go module proxy must serve github.com/pulumi/pulumi/pkg/v3@v$version"
  mv "$dir/bin/pulumi.partial" "$dir/bin/pulumi"
  ok "built v$version in $(($(date +%s) - started)) s"
fi

step "Node.js language host"
# `pulumi up` of a program directory (the platform stack) starts pulumi-language-nodejs. Pulumi's own is a
# Go module the module proxy does not serve, so the project's (scripts/toolchain/pulumi-language-nodejs) is
# built in the same pinned module as the CLI; the stamp rebuilds it when its source or pins change.
langhost_stamp=$( (cat "$root/scripts/toolchain/go.sum" "$root/scripts/toolchain/pulumi-language-nodejs/main.go"; echo "$version") | sha256sum | cut -c1-16)
if [ -x "$dir/bin/pulumi-language-nodejs" ] && [ "$(cat "$dir/bin/.pulumi-language-nodejs.stamp" 2>/dev/null)" = "$langhost_stamp" ]; then
  ok "cached at $dir/bin/pulumi-language-nodejs"
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

step "fake-gcs-server"
# The GCS API the tests run the GCP target's storage paths against (tests/helpers/fake-gcs.ts): the tenant
# stacks' gs:// state, backups, the purge on delete. Test-only, its own wrapper module, cached by version.
# It prints no version, so a stamp of the pinned go.sum tells a cached build from a stale one.
fake_gcs_version=$(fake_gcs_pinned_version)
fake_gcs_dir=$(fake_gcs_cache_dir)
fake_gcs_stamp=$(sha256sum "$root/scripts/toolchain/fake-gcs-server/go.sum" | cut -c1-16)
if [ -x "$fake_gcs_dir/bin/fake-gcs-server" ] && [ "$(cat "$fake_gcs_dir/bin/.stamp" 2>/dev/null)" = "$fake_gcs_stamp" ]; then
  ok "v$fake_gcs_version (cached at $fake_gcs_dir/bin/fake-gcs-server)"
elif [ -n "${AGENT_SANDBOX_SKIP_TEST_TOOLS:-}" ]; then
  ok "skipped: only the tests use it (npm test builds it)"
elif ! command -v go >/dev/null; then
  say "skipped: no Go toolchain to build fake-gcs-server v$fake_gcs_version (the GCS tests need it; install Go >= $(go_required_version))"
else
  say "building v$fake_gcs_version from Go modules into $fake_gcs_dir (first time only; ~2 min on 2 cores)"
  rm -rf "$fake_gcs_dir/src" && mkdir -p "$fake_gcs_dir/src" "$fake_gcs_dir/bin"
  cp "$root/scripts/toolchain/fake-gcs-server/go.mod" "$root/scripts/toolchain/fake-gcs-server/go.sum" \
    "$root/scripts/toolchain/fake-gcs-server/tools.go" "$fake_gcs_dir/src/"
  started=$(date +%s)
  (cd "$fake_gcs_dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$fake_gcs_dir/bin/fake-gcs-server.partial" \
    -ldflags "-s -w" github.com/fsouza/fake-gcs-server) ||
    die "building fake-gcs-server failed (see above); the Go module proxy must serve github.com/fsouza/fake-gcs-server@v$fake_gcs_version"
  mv "$fake_gcs_dir/bin/fake-gcs-server.partial" "$fake_gcs_dir/bin/fake-gcs-server"
  echo "$fake_gcs_stamp" >"$fake_gcs_dir/bin/.stamp"
  ok "built v$fake_gcs_version in $(($(date +%s) - started)) s"
fi

step "kubernetes control plane"
# The cluster the kubernetes backend is tested against (tests/helpers/kube-apiserver.ts, with Debian's etcd):
# kube-apiserver validates every object a tenant renders (server-side dry-run); with kube-controller-manager,
# kube-scheduler and kwok's fake node, the runtime's Kubernetes paths run against Pods that are made, scheduled,
# exec'd into and deleted. Test-only, from one wrapper module (scripts/toolchain/kubernetes: k8s.io/kubernetes plus
# a pin of each staging module it replaces with a local path), so the three share one compile; cached by version,
# with a stamp of the pinned go.sum that tells a cached build from a stale one.
kubernetes_version=$(kubernetes_pinned_version)
kubernetes_dir=$(kubernetes_cache_dir)
kubernetes_stamp=$(sha256sum "$root/scripts/toolchain/kubernetes/go.sum" | cut -c1-16)
kubernetes_commands="kube-apiserver kube-controller-manager kube-scheduler"
if [ -x "$kubernetes_dir/bin/kube-scheduler" ] && [ "$(cat "$kubernetes_dir/bin/.stamp" 2>/dev/null)" = "$kubernetes_stamp" ]; then
  ok "v$kubernetes_version (cached at $kubernetes_dir/bin: $kubernetes_commands)"
elif [ -n "${AGENT_SANDBOX_SKIP_TEST_TOOLS:-}" ]; then
  ok "skipped: only the tests use it (npm test builds it)"
elif ! command -v go >/dev/null; then
  say "skipped: no Go toolchain to build Kubernetes v$kubernetes_version (the Kubernetes tests need it; install Go >= $(go_required_version "$root/scripts/toolchain/kubernetes/go.mod"))"
else
  say "building $kubernetes_commands v$kubernetes_version from Go modules into $kubernetes_dir (first time only; 5 to 10 min on 2 cores, 2.4 GiB of memory)"
  rm -rf "$kubernetes_dir/src" && mkdir -p "$kubernetes_dir/src" "$kubernetes_dir/bin.partial"
  cp "$root/scripts/toolchain/kubernetes/go.mod" "$root/scripts/toolchain/kubernetes/go.sum" \
    "$root/scripts/toolchain/kubernetes/tools.go" "$kubernetes_dir/src/"
  started=$(date +%s)
  # Outside its own repository's build scripts the version would read v0.0.0-master: set the pinned one.
  packages=$(for command in $kubernetes_commands; do printf 'k8s.io/kubernetes/cmd/%s ' "$command"; done)
  # shellcheck disable=SC2086 # one word per package
  (cd "$kubernetes_dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$kubernetes_dir/bin.partial/" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$kubernetes_version" $packages) ||
    die "building Kubernetes failed (see above); the Go module proxy must serve k8s.io/kubernetes@v$kubernetes_version"
  echo "$kubernetes_stamp" >"$kubernetes_dir/bin.partial/.stamp"
  rm -rf "$kubernetes_dir/bin" && mv "$kubernetes_dir/bin.partial" "$kubernetes_dir/bin"
  ok "built v$kubernetes_version in $(($(date +%s) - started)) s"
fi

step "kwok"
# The fake kubelet of the tests' cluster (scripts/toolchain/kwok): it makes a node Ready, runs the Pods bound to
# it, and serves their exec with local processes. Test-only, cached by version and go.sum stamp.
kwok_version=$(kwok_pinned_version)
kwok_dir=$(kwok_cache_dir)
kwok_stamp=$(sha256sum "$root/scripts/toolchain/kwok/go.sum" | cut -c1-16)
if [ -x "$kwok_dir/bin/kwok" ] && [ "$(cat "$kwok_dir/bin/.stamp" 2>/dev/null)" = "$kwok_stamp" ]; then
  ok "v$kwok_version (cached at $kwok_dir/bin/kwok)"
elif [ -n "${AGENT_SANDBOX_SKIP_TEST_TOOLS:-}" ]; then
  ok "skipped: only the tests use it (npm test builds it)"
elif ! command -v go >/dev/null; then
  say "skipped: no Go toolchain to build kwok v$kwok_version (the Kubernetes tests need it; install Go >= $(go_required_version "$root/scripts/toolchain/kwok/go.mod"))"
else
  say "building v$kwok_version from Go modules into $kwok_dir (first time only; ~2 min on 2 cores)"
  rm -rf "$kwok_dir/src" && mkdir -p "$kwok_dir/src" "$kwok_dir/bin"
  cp "$root/scripts/toolchain/kwok/go.mod" "$root/scripts/toolchain/kwok/go.sum" \
    "$root/scripts/toolchain/kwok/tools.go" "$kwok_dir/src/"
  started=$(date +%s)
  (cd "$kwok_dir/src" && GOFLAGS=-mod=readonly go build -trimpath -o "$kwok_dir/bin/kwok.partial" \
    -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok) ||
    die "building kwok failed (see above); the Go module proxy must serve sigs.k8s.io/kwok@v$kwok_version"
  mv "$kwok_dir/bin/kwok.partial" "$kwok_dir/bin/kwok"
  echo "$kwok_stamp" >"$kwok_dir/bin/.stamp"
  ok "built v$kwok_version in $(($(date +%s) - started)) s"
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
(cd "$root" && node scripts/build-plugins.mjs >/dev/null)
ok "pulumi-resource-sandbox: $root/bin/pulumi-resource-sandbox"

step "web console"
# dist/web is what the runtime serves at /; rebuilt only when web/'s sources or the locked packages change.
web_stamp=$( (cd "$root" && find web -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum && sha256sum package-lock.json) | sha256sum | cut -c1-16)
if [ -f "$root/dist/web/index.html" ] && [ "$(cat "$root/dist/.web-source-stamp" 2>/dev/null)" = "$web_stamp" ]; then
  ok "up to date ($root/dist/web)"
else
  (cd "$root" && npm run --silent build:web) || die "building the web console failed (see above)"
  echo "$web_stamp" >"$root/dist/.web-source-stamp"
  ok "built into $root/dist/web"
fi

step "toolchain ready"
say "PATH for Pulumi: $dir/bin:$root/bin"
