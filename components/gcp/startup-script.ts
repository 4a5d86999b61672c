/**
 * The host VM's startup script: the same host baseline the local target applies (lib/host/render.ts
 * and host-config/), written by a boot-time script instead of provider resources. Pure: text in, text out.
 */
import * as path from "node:path";
import { stringify as toYaml } from "yaml";
import { GCP } from "../../lib/constants.js";
import { caddyPaths, renderCaddyConfig, type PublicFrontDoor } from "../../lib/host/caddy.js";
import {
  renderFirewallScript,
  renderHostConfig,
  renderSquidBaselineFragment,
  renderSquidConf,
  squidPaths,
} from "../../lib/host/render.js";

/** The data disk's device name, as the VM sees it under /dev/disk/by-id/google-<name>. */
export const DATA_DISK_DEVICE = "agent-sandbox-data";
/** The runtime's release, unpacked here; the systemd units run it from /opt/agent-sandbox. */
export const RUNTIME_DIR = "/opt/agent-sandbox";
/** The systemd units of host-config/systemd/ expect the config under this directory. */
export const CONFIG_DIR = "/etc/agent-sandbox";
/** The sandbox cluster's kubeconfig on the host, when the platform made one (`gcp.gke.enabled`). */
export const RUNTIME_KUBECONFIG = `${CONFIG_DIR}/kubeconfig`;
export const CACHE_DIR = "/var/cache/agent-sandbox";
export const POSTGRES_CONTAINER = "agent-sandbox-postgres";
/** Debian packages of the host baseline (Debian 13: Node.js 20.19, Docker 26, Squid 6). */
export const HOST_PACKAGES = [
  "caddy",
  "ca-certificates",
  "curl",
  // Debian 13's docker.io is the engine alone; its CLI, which the script and the Postgres unit run, is docker-cli.
  "docker-cli",
  "docker.io",
  "iptables",
  "jq",
  "nodejs",
  "npm",
  "openssl",
  // sysctl (GCE's images have it; a minimal Debian does not, and the script applies its sysctl.d file with it).
  "procps",
  "squid",
  "unzip",
] as const;
/** What the microVM launcher needs besides (lib/microvm/launcher.ts, scripts/microvm-kernel.sh). */
export const MICROVM_PACKAGES = ["qemu-system-x86", "qemu-utils", "e2fsprogs", "cpio"] as const;
/**
 * What the runtime's backups of kubernetes projects run on the host (runtime/kubernetes/backup.ts): sshfs mounts
 * a Pod's home over the cluster's exec, rclone syncs it to the bucket.
 */
export const KUBERNETES_PACKAGES = ["rclone", "sshfs"] as const;

/** Where the front door keeps its certificates and ACME account: the data disk, so a new boot disk keeps them. */
export const CADDY_STORAGE_DIR = `${GCP.dataMount}/caddy`;

/** The GCP host's front door (lib/host/caddy.ts's public form): the platform's domain, over TLS. */
export interface StartupFrontDoor {
  readonly domain: string;
  readonly issuer: PublicFrontDoor["issuer"];
  /** Caddy's admin API on loopback (tenant stacks register dev-server routes there). */
  readonly adminPort: number;
  /** The runtime's ports on loopback, behind the front door. */
  readonly apiPort: number;
  readonly terminalPort: number;
}

/** What the startup script needs to know; every value is plain (resolved outputs). */
export interface StartupScriptInput {
  readonly host: {
    readonly squidPort: number;
    readonly configDir: string;
    readonly dataDir: string;
    readonly logDir: string;
    readonly runDir: string;
  };
  /** The runtime's stack file (`agent-sandbox:*` keys), written to `<configDir>/stack.yaml`. */
  readonly runtimeStackConfig: Record<string, unknown>;
  readonly frontDoor: StartupFrontDoor;
  /** The runtime release in the bucket: `gs://<bucket>/<object>`, fetched with the VM's own identity. */
  readonly release: { readonly bucket: string; readonly object: string; readonly digest: string };
  /** The pinned Pulumi CLI and provider plugins the runtime's engine needs. */
  readonly pulumiVersion: string;
  readonly plugins: readonly { readonly name: string; readonly version: string }[];
  readonly postgresImage: string;
  /** `<location>-docker.pkg.dev`: Docker authenticates to it with the VM's identity. */
  readonly registryHost: string;
  /** The sandbox image (in the registry, tagged by content) new tenants get; pulled at boot. */
  readonly sandboxImage: string;
  /** The host runs microVM sandboxes: QEMU installed, KVM loaded, the guest kernel fetched at boot. */
  readonly microvm?: boolean;
  /**
   * The sandbox cluster's kubeconfig (its endpoint and CA; the user runs gke-gcloud-auth-plugin, which the
   * runtime does not: it mints its own token, `tenants.kubernetes.credentials: gke`), written root-only to
   * {@link RUNTIME_KUBECONFIG}.
   */
  readonly kubeconfig?: string;
}

export function validateStartupScriptInput(input: StartupScriptInput): string[] {
  const problems: string[] = [];
  if (input.host.configDir !== CONFIG_DIR)
    problems.push(
      `host.configDir must be ${CONFIG_DIR} on the GCP host (the systemd units of host-config/ use it)`,
    );
  for (const [key, value] of Object.entries(input.host))
    if (typeof value === "string" && !/^\/[A-Za-z0-9._/-]*$/.test(value))
      problems.push(`host.${key}: '${value}' must be an absolute path of plain characters`);
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(input.frontDoor.domain))
    problems.push(`frontDoor.domain: '${input.frontDoor.domain}' is not a DNS name`);
  if (!/^[0-9]+\.[0-9]+\.[0-9]+$/.test(input.pulumiVersion))
    problems.push(`pulumiVersion: '${input.pulumiVersion}' is not x.y.z`);
  for (const plugin of input.plugins)
    if (!/^[a-z0-9-]+$/.test(plugin.name) || !/^[0-9]+\.[0-9]+\.[0-9]+$/.test(plugin.version))
      problems.push(`plugin ${plugin.name}@${plugin.version} is not name@x.y.z`);
  if (!/^[a-z0-9][a-z0-9._-]*$/.test(input.release.bucket))
    problems.push(`release.bucket: '${input.release.bucket}'`);
  if (!/^[A-Za-z0-9._/-]+$/.test(input.release.object))
    problems.push(`release.object: '${input.release.object}'`);
  for (const key of ["postgresImage", "sandboxImage", "registryHost"] as const)
    if (!/^[A-Za-z0-9._:/@-]+$/.test(input[key]))
      problems.push(`${key}: '${input[key]}' is not an image reference`);
  return problems;
}

/** A file the script writes: quoted heredoc, so nothing in it is expanded by the shell. */
interface HostFileText {
  readonly path: string;
  readonly mode: string;
  readonly content: string;
}

const EOF_MARK = "AGENT_SANDBOX_EOF";

function writeFile(file: HostFileText): string {
  if (file.content.split("\n").includes(EOF_MARK))
    throw new Error(`${file.path} contains the heredoc marker`);
  const body = file.content.endsWith("\n") ? file.content : `${file.content}\n`;
  return [
    `install -d -m 0755 ${path.dirname(file.path)}`,
    `cat >${file.path}.new <<'${EOF_MARK}'`,
    `${body}${EOF_MARK}`,
    `chmod ${file.mode} ${file.path}.new && mv ${file.path}.new ${file.path}`,
  ].join("\n");
}

/** The Postgres unit: a container on loopback, its data on the data disk, its password generated on the VM. */
function postgresUnit(input: StartupScriptInput): string {
  const data = path.join(input.host.dataDir, "postgres");
  return `# The runtime's database (seed 000 §8: postgres in a container), on loopback only; data on the data disk.
[Unit]
Description=Agent sandbox database (Postgres)
After=docker.service
Requires=docker.service
Before=agent-sandbox-runtime.service

[Service]
ExecStartPre=-/usr/bin/docker rm -f ${POSTGRES_CONTAINER}
ExecStart=/usr/bin/docker run --rm --name ${POSTGRES_CONTAINER} --env-file ${CONFIG_DIR}/postgres.env -p 127.0.0.1:5432:5432 -v ${data}:/var/lib/postgresql/data ${input.postgresImage}
ExecStop=/usr/bin/docker stop ${POSTGRES_CONTAINER}
Restart=always
RestartSec=2s

[Install]
WantedBy=multi-user.target
`;
}

/** The front door's Caddy config on the GCP host: HTTPS on 443 for the platform's domain and every dev-server route. */
export function frontDoorConfig(input: StartupScriptInput): { path: string; content: string } {
  const { frontDoor, host } = input;
  const options = {
    port: GCP.httpsPort,
    adminPort: frontDoor.adminPort,
    configDir: host.configDir,
    logDir: host.logDir,
    runDir: host.runDir,
    public: {
      domain: frontDoor.domain,
      httpPort: GCP.httpPort,
      apiUpstream: `127.0.0.1:${frontDoor.apiPort}`,
      terminalUpstream: `127.0.0.1:${frontDoor.terminalPort}`,
      issuer: frontDoor.issuer,
      storageDir: CADDY_STORAGE_DIR,
    },
  };
  return { path: caddyPaths(options).config, content: renderCaddyConfig(options) };
}

/** Every file of the host baseline, rendered from host-config/ (the same sources as the local target). */
export function hostBaselineFiles(input: StartupScriptInput): HostFileText[] {
  const squid = squidPaths(input.host);
  const unit = (name: string, values: Record<string, string> = {}): HostFileText => ({
    path: `/etc/systemd/system/${name}`,
    mode: "0644",
    content: renderHostConfig(`systemd/${name}`, values),
  });
  const caddy = frontDoorConfig(input);
  return [
    {
      path: "/etc/docker/daemon.json",
      mode: "0644",
      // Images and tenant volumes live on the data disk; no IPv6 on bridges: no path around the IPv4 rules.
      content: `${JSON.stringify({ "data-root": `${GCP.dataMount}/docker`, ipv6: false, "log-driver": "journald" }, null, 2)}\n`,
    },
    {
      path: "/etc/sysctl.d/90-agent-sandbox.conf",
      mode: "0644",
      content:
        "# No IPv6 forwarding at all (seed 000 §7.1 belt-and-braces)\nnet.ipv6.conf.all.forwarding = 0\nnet.ipv6.conf.default.forwarding = 0\n",
    },
    {
      path: "/etc/tmpfiles.d/agent-sandbox.conf",
      mode: "0644",
      content: `d ${input.host.runDir} 0755 root root -\n`,
    },
    {
      path: squid.config,
      mode: "0644",
      content: renderSquidConf({ ...input.host, port: input.host.squidPort }),
    },
    { path: squid.baselineFragment, mode: "0644", content: renderSquidBaselineFragment() },
    { path: "/usr/local/sbin/agent-sandbox-firewall", mode: "0755", content: renderFirewallScript() },
    unit("agent-sandbox-firewall.service"),
    {
      // The unit's own ExecStart brings the firewall up through the runtime's local bring-up; here the same
      // rules come from the rendered script, which needs no Node.js and runs before the release is fetched.
      path: "/etc/systemd/system/agent-sandbox-firewall.service.d/gcp.conf",
      mode: "0644",
      content: "[Service]\nExecStart=\nExecStart=/usr/local/sbin/agent-sandbox-firewall\n",
    },
    unit("agent-sandbox-squid.service"),
    { path: caddy.path, mode: "0644", content: caddy.content },
    unit("agent-sandbox-caddy.service", { config: caddy.path }),
    unit("agent-sandbox-runtime.service"),
    {
      // The runtime listens on loopback behind the front door; it starts without it (its API answers the
      // host itself) and the front door's routes come back with the tenants' next update.
      path: "/etc/systemd/system/agent-sandbox-runtime.service.d/gcp.conf",
      mode: "0644",
      content:
        "[Unit]\nAfter=agent-sandbox-postgres.service agent-sandbox-caddy.service\nRequires=agent-sandbox-postgres.service\nWants=agent-sandbox-caddy.service\n",
    },
    {
      path: "/etc/systemd/system/agent-sandbox-postgres.service",
      mode: "0644",
      content: postgresUnit(input),
    },
    ...(input.kubeconfig === undefined
      ? []
      : [{ path: RUNTIME_KUBECONFIG, mode: "0600", content: input.kubeconfig }]),
    {
      path: `${CONFIG_DIR}/stack.yaml`,
      mode: "0644",
      content: `# The runtime's configuration, written by the platform stack (components/gcp/startup-script.ts).\n${toYaml({ config: input.runtimeStackConfig })}`,
    },
  ];
}

/** The startup script: idempotent, run by the guest agent at every boot. */
export function renderStartupScript(input: StartupScriptInput): string {
  const problems = validateStartupScriptInput(input);
  if (problems.length > 0) throw new Error(`startup script: ${problems.join("; ")}`);
  const { host, release } = input;
  const squid = squidPaths(host);
  const device = `/dev/disk/by-id/google-${DATA_DISK_DEVICE}`;
  const pulumiRoot = `${CACHE_DIR}/pulumi-v${input.pulumiVersion}`;
  const releaseDir = `${RUNTIME_DIR}-releases/${release.digest}`;
  const objectUrl = `https://storage.googleapis.com/storage/v1/b/${release.bucket}/o/${encodeURIComponent(release.object)}?alt=media`;
  const lines = [
    "#!/bin/bash",
    "# Agent sandbox host VM bring-up, rendered by components/gcp/startup-script.ts; runs at every boot.",
    "set -euo pipefail",
    "export DEBIAN_FRONTEND=noninteractive",
    "# Each step says its name; a failed command names its step, line and command (the runner logs both).",
    'step() { current_step=$1; echo "agent-sandbox startup: $1 (at ${SECONDS} s)"; }',
    "trap 'status=$?; echo \"agent-sandbox startup: step ${current_step:-?} failed (exit $status) at line $LINENO: $BASH_COMMAND\" >&2' ERR",
    "",
    "# 1. The data disk: Postgres, Docker's data root (images, tenant volumes), the runtime's data directory.",
    `step "1. the data disk"`,
    `if ! blkid ${device} >/dev/null 2>&1; then mkfs.ext4 -m 0 -L agent-sandbox ${device}; fi`,
    `install -d ${GCP.dataMount}`,
    `grep -q '^${device} ' /etc/fstab || echo '${device} ${GCP.dataMount} ext4 defaults,discard,nofail 0 2' >>/etc/fstab`,
    `mountpoint -q ${GCP.dataMount} || mount ${GCP.dataMount}`,
    `install -d ${GCP.dataMount}/agent-sandbox ${GCP.dataMount}/docker ${host.dataDir}`,
    `grep -q ' ${host.dataDir} ' /etc/fstab || echo '${GCP.dataMount}/agent-sandbox ${host.dataDir} none bind,nofail 0 0' >>/etc/fstab`,
    `mountpoint -q ${host.dataDir} || mount ${host.dataDir}`,
    "",
    "# 2. Packages of the host baseline; the distribution's squid service stays off (ours has its own config).",
    `step "2. packages"`,
    "apt-get update -q",
    `apt-get install -y -q --no-install-recommends ${[
      ...HOST_PACKAGES,
      ...(input.microvm ? MICROVM_PACKAGES : []),
      ...(input.kubeconfig ? KUBERNETES_PACKAGES : []),
    ].join(" ")}`,
    "systemctl disable --now squid.service caddy.service 2>/dev/null || true",
    ...(input.microvm
      ? [
          "# microVM sandboxes: the VM has nested virtualization; the runtime's probe decides KVM or TCG.",
          "modprobe kvm_intel 2>/dev/null || modprobe kvm_amd 2>/dev/null || true",
        ]
      : []),
    "",
    "# 3. The host baseline's files (host-config/, rendered by lib/host/render.ts).",
    `step "3. the host baseline files"`,
    ...hostBaselineFiles(input).map(writeFile),
    `install -d -o proxy -g proxy ${squid.logDir}`,
    `install -d ${squid.fragmentsDir} ${host.logDir} ${host.runDir}`,
    `install -d -o caddy -g caddy -m 0700 ${CADDY_STORAGE_DIR}`,
    "sysctl --system >/dev/null",
    "",
    "# 4. Secrets are made here, on the data disk, and never leave the VM (not in metadata, not in state).",
    `step "4. secrets"`,
    `if [ ! -s ${host.dataDir}/postgres.password ]; then (umask 077; openssl rand -hex 24 >${host.dataDir}/postgres.password); fi`,
    `pg_password=$(cat ${host.dataDir}/postgres.password)`,
    `(umask 077; printf 'POSTGRES_DB=sandboxes\\nPOSTGRES_USER=agent_sandbox\\nPOSTGRES_PASSWORD=%s\\n' "$pg_password" >${CONFIG_DIR}/postgres.env)`,
    `(umask 077; printf 'DATABASE_URL=postgres://agent_sandbox:%s@127.0.0.1:5432/sandboxes\\n' "$pg_password" >${CONFIG_DIR}/runtime.env)`,
    "",
    "# 5. The runtime release, read from the bucket with the VM's own identity (releases/ only).",
    `step "5. the runtime release"`,
    `if [ ! -f ${releaseDir}/package.json ]; then`,
    "  token=$(curl -fsS -H 'Metadata-Flavor: Google' http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token | jq -r .access_token)",
    `  curl -fsS -H "Authorization: Bearer $token" -o /tmp/agent-sandbox-release.zip '${objectUrl}'`,
    `  rm -rf ${releaseDir}.partial && install -d ${releaseDir}.partial`,
    `  unzip -q /tmp/agent-sandbox-release.zip -d ${releaseDir}.partial && rm -f /tmp/agent-sandbox-release.zip`,
    `  mv ${releaseDir}.partial ${releaseDir}`,
    "fi",
    `ln -sfn ${releaseDir} ${RUNTIME_DIR}`,
    "",
    "# 6. The toolchain: the pinned Pulumi CLI and plugins, npm dependencies, the project's own plugins.",
    `step "6. the toolchain"`,
    `if [ ! -x ${pulumiRoot}/bin/pulumi ]; then`,
    `  curl -fsSL https://get.pulumi.com | sh -s -- --version ${input.pulumiVersion} --install-root ${pulumiRoot} --no-edit-path`,
    "fi",
    ...input.plugins.map(
      (plugin) =>
        `PULUMI_HOME=${CACHE_DIR}/pulumi-home ${pulumiRoot}/bin/pulumi plugin install resource ${plugin.name} ${plugin.version}`,
    ),
    `(cd ${RUNTIME_DIR} && AGENT_SANDBOX_CACHE=${CACHE_DIR} PATH=${pulumiRoot}/bin:$PATH npm run setup)`,
    ...(input.microvm
      ? [
          "# The microVM guests' kernel and initramfs, from the package archive, into the cache the runtime reads.",
          `(cd ${RUNTIME_DIR} && AGENT_SANDBOX_CACHE=${CACHE_DIR} bash scripts/microvm-kernel.sh >/dev/null)`,
        ]
      : []),
    "",
    "# 7. The sandbox image, pulled as the VM (artifactregistry.reader on the repository) with a short-lived token.",
    `step "7. the sandbox image"`,
    "systemctl start docker.service",
    "token=$(curl -fsS -H 'Metadata-Flavor: Google' http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token | jq -r .access_token)",
    `printf '%s' "$token" | docker login -u oauth2accesstoken --password-stdin https://${input.registryHost}`,
    `docker pull ${input.sandboxImage}`,
    `docker logout https://${input.registryHost}`,
    "",
    "# 8. Services, in order: engine, firewall chains (after Docker's own), egress proxy, database, front door, runtime.",
    `step "8. services"`,
    "systemctl daemon-reload",
    "systemd-tmpfiles --create /etc/tmpfiles.d/agent-sandbox.conf",
    "systemctl enable docker.service agent-sandbox-firewall.service agent-sandbox-squid.service agent-sandbox-postgres.service agent-sandbox-caddy.service agent-sandbox-runtime.service",
    "systemctl restart docker.service",
    "systemctl restart agent-sandbox-firewall.service agent-sandbox-squid.service agent-sandbox-postgres.service agent-sandbox-caddy.service",
    "systemctl restart agent-sandbox-runtime.service",
    'echo "agent-sandbox startup: done in ${SECONDS} s"',
    "",
  ];
  return lines.join("\n");
}
