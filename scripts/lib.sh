# Shared helpers of the scripts/ entry points (sourced, not run).
# shellcheck shell=bash

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
say() { printf '    %s\n' "$*"; }
ok() { printf '    \033[32mok\033[0m %s\n' "$*"; }
die() { printf '\n\033[31merror:\033[0m %s\n' "$*" >&2; exit 1; }

# A tool's version is pinned once, by its wrapper module's requirement (go.mod FILE, module path MODULE).
pinned_module_version() { sed -n "s|^require $2 v\([0-9.]*\)\$|\1|p" "$1"; }
pulumi_pinned_version() { pinned_module_version "$root/scripts/toolchain/go.mod" github.com/pulumi/pulumi/pkg/v3; }
actionlint_pinned_version() {
  pinned_module_version "$root/scripts/toolchain/actionlint/go.mod" github.com/rhysd/actionlint
}
fake_gcs_pinned_version() {
  pinned_module_version "$root/scripts/toolchain/fake-gcs-server/go.mod" github.com/fsouza/fake-gcs-server
}
kubernetes_pinned_version() {
  pinned_module_version "$root/scripts/toolchain/kubernetes/go.mod" k8s.io/kubernetes
}
# The tests' real node's kubelet (scripts/toolchain/kubelet): the control plane's version, in a module of its own.
kubelet_pinned_version() { pinned_module_version "$root/scripts/toolchain/kubelet/go.mod" k8s.io/kubernetes; }
kwok_pinned_version() { pinned_module_version "$root/scripts/toolchain/kwok/go.mod" sigs.k8s.io/kwok; }
pebble_pinned_version() { pinned_module_version "$root/scripts/toolchain/pebble/go.mod" github.com/letsencrypt/pebble/v2; }
# Pulumi's Kubernetes provider: the module's pseudo-version (it serves no release), and the @pulumi/kubernetes
# release whose schema that commit serves, which the provider announces itself as (scripts/toolchain/pulumi-kubernetes).
pulumi_kubernetes_module_version() {
  sed -n 's|^require github.com/pulumi/pulumi-kubernetes/provider/v4 \(v[^ ]*\)$|\1|p' \
    "$root/scripts/toolchain/pulumi-kubernetes/go.mod"
}
pulumi_kubernetes_sdk_version() { node -p 'require(process.argv[1]).dependencies["@pulumi/kubernetes"]' "$root/package.json"; }
pulumi_kubernetes_cache_dir() { echo "$(cache_root)/pulumi-kubernetes-v$(pulumi_kubernetes_sdk_version)"; }
# The Go a wrapper module needs (its `go` line): the Pulumi CLI's, or that of the go.mod FILE given.
go_required_version() { sed -n 's/^go \([0-9.]*\)$/\1/p' "${1:-$root/scripts/toolchain/go.mod}"; }
cache_root() { echo "${AGENT_SANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-sandbox}"; }
pulumi_cache_dir() { echo "$(cache_root)/pulumi-v$(pulumi_pinned_version)"; }
actionlint_cache_dir() { echo "$(cache_root)/actionlint-v$(actionlint_pinned_version)"; }
fake_gcs_cache_dir() { echo "$(cache_root)/fake-gcs-server-v$(fake_gcs_pinned_version)"; }
kubernetes_cache_dir() { echo "$(cache_root)/kubernetes-v$(kubernetes_pinned_version)"; }
kubelet_cache_dir() { echo "$(cache_root)/kubelet-v$(kubelet_pinned_version)"; }
kwok_cache_dir() { echo "$(cache_root)/kwok-v$(kwok_pinned_version)"; }
pebble_cache_dir() { echo "$(cache_root)/pebble-v$(pebble_pinned_version)"; }
# git-delta, the image's diff pager: pinned by the sandbox image's Dockerfile (ARG GIT_DELTA_VERSION), built from
# crates.io by scripts/toolchain/git-delta.sh where the image's base has no package of it.
git_delta_pinned_version() { sed -n 's/^ARG GIT_DELTA_VERSION=\([0-9.]*\)$/\1/p' "$root/sandbox-image/Dockerfile"; }
git_delta_cache_dir() { echo "$(cache_root)/git-delta-v${1:-$(git_delta_pinned_version)}"; }
pulumi_version_of() { [ -x "$1" ] && "$1" version 2>/dev/null || true; }

require_root() {
  [ "$(id -u)" = 0 ] && return 0
  die "$1 must run as root, because it: installs Debian packages (docker.io, squid, docker-registry,
  iptables), starts the Docker daemon, Squid and the registry, and writes the project's iptables chains
  (SANDBOX-INPUT, SANDBOX-FORWARD). Run it again as root, e.g. sudo $1"
}

# What both README commands need before they do their own part: the toolchain, this host's baseline
# (`pulumi up` of the platform stack's local target, stack file Pulumi.<stack>.yaml) and the sandbox image.
prepare_local_platform() {
  bash "$root/scripts/setup.sh"
  step "host packages"
  (cd "$root" && node --import tsx runtime/host/bring-up.ts --only packages)
  step "local platform: pulumi up of stack ${AGENT_SANDBOX_STACK:-dev} (stacks/platform, target local)"
  (cd "$root" && node --import tsx runtime/host/platform-up.ts)
  step "sandbox image"
  (cd "$root" && node --import tsx sandbox-image/build.ts)
}
