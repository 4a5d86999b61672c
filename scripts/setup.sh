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

# The tools only the tests use (actionlint, fake-gcs-server, pebble, the Kubernetes control plane, kubelet, kwok,
# Pulumi's Kubernetes provider): scripts/test-tools.sh. `npm test` builds them in the background beside the rest
# of its set-up (AGENT_SANDBOX_TEST_TOOLS=background: scripts/test.sh waits for them before the tests); anyone
# else running this set-up gets them here, one after another (or their skips, with AGENT_SANDBOX_SKIP_TEST_TOOLS).
if [ "${AGENT_SANDBOX_TEST_TOOLS:-}" = background ]; then
  step "test tools' Go builds"
  ok "building in the background (scripts/test-tools.sh; npm test waits for them before its tests)"
else
  bash "$root/scripts/test-tools.sh"
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
