#!/usr/bin/env bash
# `npm test`: sets up everything the tests use (toolchain, host baseline, a test Postgres), then runs the
# unit and integration tests. Extra arguments go to vitest (e.g. a file filter).
# `npm run test:quick` (--quick): the same set-up and static checks, then the unit tests and only the
# integration files whose imports reach a changed file (vitest --changed: against origin/main where there
# is one, else the working tree's uncommitted changes). For development; `npm test` runs everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
quick=false
if [ "${1:-}" = "--quick" ]; then
  quick=true
  shift
fi
require_root "npm test"

# The tools only the tests use are Go builds, most of a cold set-up (about 23 minutes of both cores on a fresh
# machine, session 62): they build in the background, at a lower priority, beside the rest of the set-up (npm's
# packages, the Pulumi CLI, Debian's packages, the platform's `pulumi up`, the sandbox image, the static
# checks), which waits on the network and the disk often enough to leave them the CPU. Their output goes to
# test-artifacts/test-tools.log, printed when the tests wait for them; a set-up that fails stops them (their
# own process group).
mkdir -p "$root/test-artifacts"
tools_log="$root/test-artifacts/test-tools.log"
setsid --wait nice -n 10 bash "$root/scripts/test-tools.sh" >"$tools_log" 2>&1 </dev/null &
tools_pid=$!
trap 'kill -- -"$tools_pid" 2>/dev/null || true' EXIT

AGENT_SANDBOX_TEST_TOOLS=background prepare_local_platform

step "test tools"
# systemd-analyze verifies the GCP host's units; ip (netns) plays "the internet"; ps finds leftovers;
# chromium is the headless browser the web console's test drives (playwright-core, executablePath);
# actionlint checks the workflows' run: scripts with shellcheck (the same checks on every machine);
# caddy is the front door's proxy (lib/host/caddy.ts; not yet part of the host baseline); qemu, qemu-img,
# mkfs.ext4 and cpio run the microVMs (lib/microvm/) and build their disks and initramfs; etcd is the store
# of the kube-apiserver the kubernetes backend's objects are validated by (tests/helpers/kube-apiserver.ts);
# sftp-server is what kwok runs for an SFTP session through the kubernetes SSH gateway (as the image does);
# sshfs mounts a Pod's home for the runtime's backups of kubernetes projects (runtime/kubernetes/backup.ts);
# python3-venv makes the virtualenv Schemathesis is installed into (below); the CNI plugins give the tests' real
# node's Pods their network, and gcc compiles its pause binary (below).
missing=$(for pkg in systemd iproute2 procps chromium shellcheck caddy qemu-system-x86 qemu-utils e2fsprogs cpio etcd-server openssh-sftp-server sshfs python3-venv containernetworking-plugins gcc libc6-dev; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || echo "$pkg"; done)
if [ -n "$missing" ]; then
  say "installing $missing (apt-get)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  # The package starts a system etcd on 127.0.0.1:2379 where an init system runs; the tests start their own
  # on free ports, and nothing of theirs may be left running.
  if printf '%s\n' "$missing" | grep -qx etcd-server; then
    if [ -d /run/systemd/system ]; then systemctl disable --now etcd.service >/dev/null 2>&1 || true
    else service etcd stop >/dev/null 2>&1 || true; update-rc.d etcd disable >/dev/null 2>&1 || true; fi
  fi
fi
ok "systemd-analyze, ip, ps, chromium, shellcheck, caddy, qemu, qemu-img, mkfs.ext4, cpio, etcd, sftp-server, CNI plugins"

# The PyPI clients the tests run against a live runtime, each in a virtualenv of its own cached outside the
# repo under its version, every package pinned (scripts/toolchain/<name>/requirements.txt, a pip freeze).
# Debian's python3 (python3-venv's), not whichever python3 is first on PATH: a pyenv shim's interpreter can
# change or go away under the cache. Reinstalled only when the list changes. Prints the virtualenv.
pinned_venv() { # <name> <package whose pin names the version> <what, for messages> <module to import>
  local requirements="$root/scripts/toolchain/$1/requirements.txt" version dir stamp
  version=$(sed -n "s/^$2==\\([0-9.]*\\)\$/\\1/p" "$requirements")
  [ -n "$version" ] || die "$requirements does not pin $2"
  dir="$(cache_root)/$1-v$version"
  stamp=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ] || ! "$dir/bin/python" -c "import $4" >/dev/null 2>&1; then
    say "installing $3 $version (pip, into $dir)" >&2
    rm -rf "$dir"
    /usr/bin/python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements" >&2 ||
      die "installing $3 failed (see above); PyPI must serve what $requirements pins"
    echo "$stamp" >"$dir/.stamp"
  fi
  echo "$dir"
}
# Schemathesis, the API fuzzer tests/integration/schemathesis.test.ts runs.
st_dir=$(pinned_venv schemathesis schemathesis Schemathesis schemathesis)
ok "$("$st_dir/bin/st" --version) ($st_dir)"
# E2B's Python SDK (PyPI `e2b`, unchanged), the client of tests/integration/e2b-python.test.ts.
e2b_dir=$(pinned_venv e2b-python e2b "E2B's Python SDK" e2b)
ok "e2b for Python $("$e2b_dir/bin/python" -c 'import importlib.metadata as m; print(m.version("e2b"))') ($e2b_dir)"

step "microVM guest kernel"
# Debian's cloud kernel and the guest's initramfs (scripts/microvm-kernel.sh), fetched from the package
# archive here, in the set-up, and cached outside the repo: the tests only read the cache.
kernel_dir=$(bash "$root/scripts/microvm-kernel.sh" | tail -n 1)
ok "$kernel_dir"

step "test Postgres"
TEST_DATABASE_URL=$(bash "$root/scripts/test-postgres.sh" | tail -n 1)
export TEST_DATABASE_URL
ok "$TEST_DATABASE_URL"

step "static checks"
# The project's own binaries, not npx: no npm start-up per tool, and none of npm's config warnings.
bin="$root/node_modules/.bin"
(cd "$root" && "$bin/tsc" --noEmit && "$bin/eslint" --max-warnings 0 . && "$bin/prettier" --check --log-level warn .)
ok "types, lint, format"

step "test tools' Go builds (in the background since the set-up's start)"
tools_status=0
wait "$tools_pid" || tools_status=$?
trap - EXIT # its process group is gone: nothing to stop, and its number may be another's by now
cat "$tools_log"
[ "$tools_status" = 0 ] || die "building the test tools failed (exit $tools_status; their output above, and in $tools_log)"

# The sandbox ("pause") container of the tests' real node's Pods (tests/helpers/kube-node.ts): Kubernetes' own
# pause.c from the module the kubelet was built from, compiled static, so no registry is asked for
# registry.k8s.io/pause. Cached beside the kubelet.
kubelet_bin_dir="$(kubelet_cache_dir)/bin"
pause_source="$(go env GOMODCACHE 2>/dev/null || true)/k8s.io/kubernetes@v$(kubelet_pinned_version)/build/pause/linux/pause.c"
if [ -x "$kubelet_bin_dir/pause" ]; then
  ok "pause (cached at $kubelet_bin_dir)"
elif [ -f "$pause_source" ] && [ -d "$kubelet_bin_dir" ]; then
  gcc -Os -Wall -Werror -static -DVERSION="v$(kubelet_pinned_version)" -o "$kubelet_bin_dir/pause.partial" "$pause_source" ||
    die "compiling Kubernetes' pause.c failed (see above)"
  mv "$kubelet_bin_dir/pause.partial" "$kubelet_bin_dir/pause"
  ok "pause compiled from $pause_source"
else
  say "no pause binary: the kubelet's build (scripts/test-tools.sh) did not run, so the real node's tests fail naming it"
fi

step "tests"
cd "$root"
status=0
if $quick; then
  since=()
  git -C "$root" rev-parse -q --verify origin/main >/dev/null && since=(origin/main)
  say "unit tests"
  "$bin/vitest" run tests/unit "$@" || status=$?
  say "integration files reaching what changed since ${since[0]:-the last commit}"
  "$bin/vitest" run --changed "${since[@]}" --passWithNoTests --exclude 'tests/unit/**' "$@" || status=$?
  exit "$status"
fi
"$bin/vitest" run --reporter=default --reporter=json --outputFile.json=test-artifacts/vitest.json "$@" || status=$?
# Where the time went (test-artifacts/timings.json, the slowest files), then one plain summary line that any
# CI can read.
node --import tsx scripts/test-report.ts || true
exit "$status"
