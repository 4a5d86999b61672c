#!/usr/bin/env bash
# `npm run local`: prepares the toolchain and this machine (the local target's host baseline), then runs
# the runtime service in the foreground. Safe to run again; Ctrl-C stops the service (the host services
# it started keep running, as services do).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
require_root "npm run local"

# actionlint, fake-gcs-server, the Kubernetes control plane and kwok are the tests' alone: the platform runs without them.
AGENT_SANDBOX_SKIP_TEST_TOOLS=1 prepare_local_platform

step "runtime service"
cd "$root"
# The runtime's bundle, as the setup just built it (scripts/bundles.ts): no TypeScript loader in the process.
exec node --enable-source-maps dist/runtime/main.mjs
