#!/usr/bin/env bash
# `npm run test:gcp-host`: the GCP host's startup script booted for real in a fresh Debian 13 system with systemd
# (tests/gcp-host/boot.test.ts, issue 21), from the same set-up as `npm test` plus its own fixtures
# (scripts/gcp-host-fixtures.sh: the root, the package mirror, the Postgres image). Extra arguments go to vitest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
require_root "npm run test:gcp-host"

prepare_local_platform

step "GCP host fixtures"
AGENT_SANDBOX_GCP_HOST_FIXTURES=$(bash "$root/scripts/gcp-host-fixtures.sh" | tail -n 1)
export AGENT_SANDBOX_GCP_HOST_FIXTURES
ok "$AGENT_SANDBOX_GCP_HOST_FIXTURES"

step "the GCP host's boot"
cd "$root"
exec "$root/node_modules/.bin/vitest" run --config vitest.gcp-host.config.ts "$@"
