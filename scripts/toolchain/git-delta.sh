#!/usr/bin/env bash
# git-delta, the sandbox image's diff pager, built from crates.io into the cache (outside the repo, keyed by
# version) for bases whose package archive has none: Debian bookworm has no git-delta (nor its backports, and
# trixie's needs glibc 2.39); Ubuntu 24.04 has it in universe. sandbox-image/build.ts runs this before each
# image build and copies the binary into the build context's vendor/. It links the build host's glibc, so the host's must be no newer than the base's
# (Debian 12 builds for bookworm and Ubuntu 24.04); the image runs `delta --version` to prove it.
# Usage: scripts/toolchain/git-delta.sh [VERSION]   (default: the Dockerfile's ARG GIT_DELTA_VERSION)
# Prints the directory that holds bin/delta on its last line; progress goes to stderr. Exit 3: no cargo.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

version=${1:-$(git_delta_pinned_version)}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "git-delta version '$version' is not x.y.z"
dir=$(git_delta_cache_dir "$version")
if [ "$("$dir/bin/delta" --version 2>/dev/null)" = "delta $version" ]; then
  echo "$dir"
  exit 0
fi

# rustup installs cargo into $CARGO_HOME/bin, which a non-login shell's PATH may lack.
cargo=$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")
if [ ! -x "$cargo" ]; then
  printf '\n\033[31merror:\033[0m %s\n' "git-delta $version is not packaged for this image's base and there is no cargo to build it
  from crates.io. Install Rust (https://rustup.rs, or Debian: apt-get install cargo) and run this again, or build
  the image on a base whose apt has git-delta: npm run image:build -- --base ubuntu:24.04" >&2
  exit 3
fi

say "building git-delta $version from crates.io into $dir (first time only; ~4 min on 2 cores)" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
# --locked: the crate's own Cargo.lock, so the build is the release's. The crate has no optional features (git2
# is built without its default ones); --no-default-features keeps it so if a release adds some. Stripped, the
# binary is a third of its size; the target directory is thrown away (a rebuild is a new version anyway).
CARGO_TARGET_DIR="$work/target" CARGO_PROFILE_RELEASE_STRIP=symbols \
  "$cargo" install git-delta --version "$version" --locked --no-default-features --root "$work/root" --quiet >&2 ||
  die "building git-delta $version failed (see above); it needs crates.io and a C compiler (Debian: build-essential)"
[ "$("$work/root/bin/delta" --version)" = "delta $version" ] || die "the git-delta built does not report version $version"
mkdir -p "$dir"
rm -rf "${dir:?}/bin.partial" "${dir:?}/bin"
mv "$work/root/bin" "$dir/bin.partial" && mv "$dir/bin.partial" "$dir/bin"
ok "git-delta $version built in $(($(date +%s) - started)) s ($dir/bin/delta)" >&2
echo "$dir"
