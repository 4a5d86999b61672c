#!/usr/bin/env bash
# The web console's source stamp: what dist/web was built from (web/'s files and the locked packages).
# scripts/setup.sh rebuilds dist/web when it differs from dist/.web-source-stamp; the tests that serve the
# console (tests/helpers/web-console-build.ts) do the same, one at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
(find web -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum && sha256sum package-lock.json) | sha256sum | cut -c1-16
