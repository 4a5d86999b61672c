#!/usr/bin/env bash
# What `npm run test:gcp-host` boots the GCP host's startup script in (issue 21), made from Debian's package
# archive and cached outside the repository, keyed by what goes into it: $(cache_root)/gcp-host/<key>/.
# Prints fixtures.json's path on its last line. Idempotent: a cached build is reused, a partial one never is.
#
# - A fresh Debian 13 system as GCE's debian-13 image starts (systemd, apt, curl, CA certificates), with GCE's
#   startup-script runner (tests/gcp-host/root/): imported as the Docker image agent-sandbox/gcp-host-root:<key>.
#   Debian 13, not 12: the runtime needs Node.js >= 20.19 and the host installs Debian's (bookworm has 18).
# - The host's package mirror: every package the startup script installs (HOST_PACKAGES of
#   components/gcp/startup-script.ts) and its dependencies, downloaded once, one version each, in a flat
#   repository with its Packages index; the test mounts it as the root's only apt source, so the boot itself
#   reaches no network. packages.txt lists the versions it pins.
# - The platform's Postgres image (agent-sandbox/gcp-host-postgres:<key>): Debian's PostgreSQL behind the
#   official image's contract (POSTGRES_DB/USER/PASSWORD, data in /var/lib/postgresql/data), because no
#   registry can be pulled from here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

suite=trixie
mirror=${AGENT_SANDBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What GCE's debian-13 image has that the startup script relies on before it installs anything.
base_packages=systemd-sysv,dbus,curl,ca-certificates,iproute2,kmod,e2fsprogs,util-linux
for tool in debootstrap dpkg-scanpackages docker; do
  command -v "$tool" >/dev/null || die "$tool is not installed (the GCP host test's fixtures need it)"
done

host_packages=$(cd "$root" && node --import tsx -e '
  import("./components/gcp/startup-script.ts").then((m) => console.log(m.HOST_PACKAGES.join(" ")))')
[ -n "$host_packages" ] || die "could not read HOST_PACKAGES from components/gcp/startup-script.ts"
key=$( (echo "$suite $base_packages $host_packages"; cat "$0"; find "$root/tests/gcp-host/root" "$root/tests/gcp-host/postgres" -type f -print0 | LC_ALL=C sort -z | xargs -0 cat) | sha256sum | cut -c1-12)
dir="$(cache_root)/gcp-host/$key"
root_image="agent-sandbox/gcp-host-root:$key"
postgres_image="agent-sandbox/gcp-host-postgres:$key"

if [ -f "$dir/fixtures.json" ] && docker image inspect "$root_image" "$postgres_image" >/dev/null 2>&1; then
  echo "$dir/fixtures.json"
  exit 0
fi

work="$dir.partial"
rm -rf "$work" && mkdir -p "$work"
trap 'umount -R "$work/root/proc" 2>/dev/null || true' EXIT

step "Debian $suite root (debootstrap, ~1 min)" >&2
debootstrap --variant=minbase --include="$base_packages" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  die "debootstrap $suite from $mirror failed: see $work/debootstrap.log"

step "the host's package mirror: $host_packages" >&2
# What the startup script's `apt-get install --no-install-recommends` would fetch on this very system.
mount -t proc proc "$work/root/proc"
chroot "$work/root" apt-get update -q >"$work/apt.log" 2>&1 || die "apt-get update in the $suite root failed: see $work/apt.log"
# shellcheck disable=SC2086 # a list of package names
chroot "$work/root" apt-get install -y -q --download-only --no-install-recommends $host_packages >>"$work/apt.log" 2>&1 ||
  die "downloading the host packages failed: see $work/apt.log"
umount "$work/root/proc"
mkdir -p "$work/apt"
mv "$work/root/var/cache/apt/archives/"*.deb "$work/apt/"
(cd "$work/apt" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages)
(cd "$work/apt" && for deb in *.deb; do dpkg-deb -f "$deb" Package Version | paste -sd' '; done) | sed 's/^Package: \(.*\) Version: /\1 /' >"$work/packages.txt"
say "$(wc -l <"$work/packages.txt") packages" >&2

step "the root as GCE boots it: its only apt source is the test's mirror; GCE's startup-script runner" >&2
rm -rf "$work/root/var/lib/apt/lists/"* "$work/root/etc/apt/sources.list" "$work/root/etc/apt/sources.list.d/"*
echo "deb [trusted=yes] file:/srv/agent-sandbox-apt ./" >"$work/root/etc/apt/sources.list.d/agent-sandbox-test.list"
cp -a "$root/tests/gcp-host/root/." "$work/root/"
chmod 0755 "$work/root/usr/local/sbin/"*
: >"$work/root/etc/machine-id"
echo agent-sandbox-host >"$work/root/etc/hostname"
tar -C "$work/root" -c . | docker import - "$root_image" >/dev/null
rm -rf "$work/root"

step "the platform's Postgres image (Debian's PostgreSQL, the official image's environment)" >&2
DOCKER_BUILDKIT=0 docker build -q -t "$postgres_image" "$root/tests/gcp-host/postgres" >"$work/postgres-build.log" 2>&1 ||
  die "building $postgres_image failed: see $work/postgres-build.log"

printf '{"key":"%s","rootImage":"%s","postgresImage":"%s","aptRepo":"%s","packages":"%s"}\n' \
  "$key" "$root_image" "$postgres_image" "$dir/apt" "$dir/packages.txt" >"$work/fixtures.json"
rm -rf "$dir" && mv "$work" "$dir"
# Fixtures of other keys are stale: their directories and images go (the registry's storage stays).
for old in "$(cache_root)/gcp-host/"*/; do
  old_key=$(basename "$old")
  case "$old_key" in "$key" | registry) continue ;; esac
  docker rmi "agent-sandbox/gcp-host-root:$old_key" "agent-sandbox/gcp-host-postgres:$old_key" >/dev/null 2>&1 || true
  rm -rf "$old"
done
echo "$dir/fixtures.json"
