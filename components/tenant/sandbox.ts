import { GVISOR_RUNTIME } from "../../lib/host/docker-engine.js";
import * as pulumi from "@pulumi/pulumi";
import { SANDBOX_CAPABILITIES, SANDBOX_SSH_PORT, SANDBOX_SSH_USER } from "../../lib/constants.js";
import { DockerContainer, type ContainerMount } from "../resources/docker-container.js";
import { HostDirectory } from "../resources/host-directory.js";
import { HostFile } from "../resources/host-file.js";
import { tenantNames } from "./names.js";
import { backupScheduleEnv } from "./spec.js";

/** Arguments of {@link TenantSandbox}. */
export interface TenantSandboxArgs {
  readonly projectId: string;
  readonly image: string;
  /** `gvisor`: the container under gVisor's runsc (the spec's `isolation`); runc when absent. */
  readonly isolation?: "runc" | "gvisor";
  readonly network: pulumi.Input<string>;
  readonly address: pulumi.Input<string>;
  readonly gateway: pulumi.Input<string>;
  readonly proxyPort: number;
  readonly volumeName: pulumi.Input<string>;
  /** The volume's host path, under which protected paths are bound read-only over themselves. */
  readonly volumeMountpoint: pulumi.Input<string>;
  readonly protectedPaths: readonly string[];
  readonly sshPublicKey: pulumi.Input<string>;
  /**
   * A host directory of this tenant's own for its authorized key (`<dir>/agent`, root's, 0644), mounted
   * read-only at /etc/ssh/authorized_keys: sshd reads it at each login, so a new key needs no new
   * container. Absent: the key goes in the environment (SSH_PUBLIC_KEY), as before it existed.
   */
  readonly sshKeysDir?: string;
  readonly sshHostPort: number;
  readonly backupRemote: pulumi.Input<string>;
  readonly backupHostDir?: pulumi.Input<string | undefined>;
  readonly backupIntervalSeconds: number;
  /** sandbox-backup's BACKUP_AFTER_CHANGE_SECONDS; undefined: not set (the interval alone). */
  readonly backupAfterChangeSeconds?: number;
  /**
   * gcp: the sandbox's GCS credentials are a short-lived token of the tenant's service account that the
   * runtime writes to `secretsDir`/gcs-token.json and renews (runtime/gcp/credentials.ts); the container
   * gets its path as GCS_TOKEN_FILE. Never a key.
   */
  readonly gcsTokenFile?: boolean;
  /**
   * A host directory of this tenant's own for files that must not be in the image or the environment
   * (a `docker commit` copies both into every snapshot): the GCS token goes here, root-only, and is
   * bind-mounted read-only under `/run/secrets`. Required with `gcsTokenFile`.
   */
  readonly secretsDir?: string;
  /**
   * What writes the project's secrets into `secretsDir` (components/tenant/secrets.ts): with it the
   * directory is always mounted at `/run/secrets`, after they are written.
   */
  readonly secretFiles?: readonly pulumi.Resource[];
  /** Whether the tenant's gateway address serves the credential gateway: then it is in NO_PROXY. */
  readonly credentialGateway?: boolean;
  readonly limits: { readonly memoryMiB: number; readonly cpus: number; readonly pids: number };
  readonly running: boolean;
  readonly labels: Record<string, string>;
}

/** A tmpfs of `1/fraction` of the memory limit, in whole MiB. */
/**
 * The sizes of /tmp and /var/tmp: half and a quarter of the default memory limit (1 GiB). Fixed, not
 * derived from the project's limits: a tmpfs cannot be resized under a running container, so a size that
 * followed the memory limit would turn every limits change (in place, the processes kept) into a
 * replacement. Under a smaller memory limit, filling them meets the memory cgroup before their size.
 */
export const TMP_BYTES = 512 << 20;
export const VAR_TMP_BYTES = 256 << 20;

/** The GCS token's file name in the tenant's secrets directory (and under /run/secrets). */
export const GCS_TOKEN_FILE = "gcs-token.json";

export function validateTenantSandboxArgs(args: Pick<TenantSandboxArgs, "limits" | "sshHostPort">): string[] {
  const problems: string[] = [];
  if (args.limits.memoryMiB < 256) problems.push(`limits.memoryMiB ${args.limits.memoryMiB} is below 256`);
  if (!(args.limits.cpus > 0)) problems.push(`limits.cpus ${args.limits.cpus} must be positive`);
  if (args.sshHostPort < 1024 || args.sshHostPort > 65535)
    problems.push(`sshHostPort ${args.sshHostPort} is outside 1024-65535`);
  return problems;
}

/**
 * The sandbox's environment, a container's or a microVM's: the project id, the explicit proxy
 * on the tenant's gateway, what bypasses it (loopback, and the credential gateway when there is one), the
 * backup remote and schedule.
 */
export function sandboxEnv(
  args: Pick<
    TenantSandboxArgs,
    | "projectId"
    | "gateway"
    | "proxyPort"
    | "credentialGateway"
    | "backupRemote"
    | "backupIntervalSeconds"
    | "backupAfterChangeSeconds"
  >,
): Record<string, pulumi.Input<string>> {
  const proxy = pulumi.interpolate`http://${args.gateway}:${args.proxyPort}`;
  // The credential gateway is on the gateway address, reached directly (Squid refuses private ones).
  const noProxy = args.credentialGateway
    ? pulumi.interpolate`localhost,127.0.0.1,${args.gateway}`
    : "localhost,127.0.0.1";
  return {
    PROJECT_ID: args.projectId,
    HTTP_PROXY: proxy,
    HTTPS_PROXY: proxy,
    http_proxy: proxy,
    https_proxy: proxy,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    BACKUP_REMOTE: args.backupRemote,
    ...backupScheduleEnv(args.backupIntervalSeconds, args.backupAfterChangeSeconds),
  };
}

/**
 * The sandbox container: the seed's environment (PROJECT_ID, proxy variables, NO_PROXY), limits, every
 * capability dropped but the entrypoint's, no DNS (the explicit proxy resolves names), and a
 * desired run state that start/stop change in place.
 */
export class TenantSandbox extends pulumi.ComponentResource {
  public readonly containerName: pulumi.Output<string>;
  public readonly containerId: pulumi.Output<string>;
  public readonly running: pulumi.Output<boolean>;

  constructor(name: string, args: TenantSandboxArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Sandbox", name, {}, opts);
    const problems = validateTenantSandboxArgs(args);
    if (args.gcsTokenFile && !args.secretsDir)
      problems.push("secretsDir is required to deliver the GCS token (never through the environment)");
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const mounts: pulumi.Input<ContainerMount>[] = [
      { type: "volume", source: args.volumeName, target: "/home/agent" },
      // What the entrypoint writes at run time (the key for rclone, sshd's state) is in memory, never in
      // the container's layer, so never in a snapshot.
      { type: "tmpfs", target: "/run" },
      // The agent's only writable paths outside its home are these two and /run: all in memory, sized
      // (TMP_BYTES) and charged to the sandbox's memory limit, so nothing the agent writes outside its home reaches the
      // host's disk. Cleared when the sandbox stops, as a distribution's
      // tmpfs /tmp is at boot; work that must last goes in /home/agent.
      {
        type: "tmpfs",
        target: "/tmp",
        tmpfs: { sizeBytes: TMP_BYTES, mode: 0o1777 },
      },
      {
        type: "tmpfs",
        target: "/var/tmp",
        tmpfs: { sizeBytes: VAR_TMP_BYTES, mode: 0o1777 },
      },
    ];
    if (args.backupHostDir) {
      mounts.push(
        pulumi
          .output(args.backupHostDir)
          .apply((dir) => ({ type: "bind" as const, source: dir ?? "", target: "/mnt/backup" })),
      );
    }
    for (const protectedPath of args.protectedPaths) {
      mounts.push(
        pulumi.output(args.volumeMountpoint).apply((root) => ({
          type: "bind" as const,
          source: `${root}/${protectedPath}`,
          target: `/home/agent/${protectedPath}`,
          readOnly: true,
        })),
      );
    }
    const env: Record<string, pulumi.Input<string>> = {
      ...sandboxEnv(args),
      ...(args.sshKeysDir ? {} : { SSH_PUBLIC_KEY: args.sshPublicKey }),
    };
    const dependsOn: pulumi.Resource[] = [...(args.secretFiles ?? [])];
    if (args.sshKeysDir) {
      const keysDir = new HostDirectory(
        `${name}-ssh-keys-dir`,
        { path: args.sshKeysDir, uid: 0, gid: 0, mode: "0755", deleteContents: true },
        { parent: this },
      );
      const key = new HostFile(
        `${name}-ssh-key`,
        {
          path: `${args.sshKeysDir}/${SANDBOX_SSH_USER}`,
          content: pulumi.interpolate`${args.sshPublicKey}\n`,
        },
        { parent: this, dependsOn: [keysDir] },
      );
      dependsOn.push(key);
      mounts.push({
        type: "bind",
        source: args.sshKeysDir,
        target: "/etc/ssh/authorized_keys",
        readOnly: true,
      });
    }
    const secretsMount = {
      type: "bind" as const,
      source: args.secretsDir ?? "",
      target: "/run/secrets",
      readOnly: true,
    };
    if (args.secretsDir && args.secretFiles) mounts.push(secretsMount);
    if (args.gcsTokenFile && args.secretsDir) {
      // The runtime writes the token after the tenant's account exists; the directory must exist to mount.
      const dir = new HostDirectory(
        `${name}-secrets-dir`,
        { path: args.secretsDir, uid: 0, gid: 0, mode: "0700", deleteContents: true },
        { parent: this },
      );
      dependsOn.push(dir);
      if (!args.secretFiles) mounts.push(secretsMount);
      env.GCS_TOKEN_FILE = `/run/secrets/${GCS_TOKEN_FILE}`;
    }
    const container = new DockerContainer(
      `${name}-container`,
      {
        name: tenantNames(args.projectId).container,
        image: args.image,
        env,
        labels: args.labels,
        memoryBytes: args.limits.memoryMiB * 1024 * 1024,
        nanoCpus: Math.round(args.limits.cpus * 1e9),
        pidsLimit: args.limits.pids,
        capAdd: [...SANDBOX_CAPABILITIES],
        network: args.network,
        ipv4Address: args.address,
        // The engine's embedded resolver forwards what reaches it to these servers; for a loopback one
        // it does so from the host's namespace (a path out, were a resolver ever to listen there). The
        // gateway is inside the tenant's firewall, which drops it. The sandbox itself never asks: its
        // entrypoint points resolv.conf at its own loopback, so a lookup fails at once; Squid resolves names.
        dns: [args.gateway],
        mounts,
        ports: [{ containerPort: SANDBOX_SSH_PORT, hostPort: args.sshHostPort }],
        running: args.running,
        ...(args.isolation === "gvisor" ? { runtime: GVISOR_RUNTIME } : {}),
      },
      { parent: this, dependsOn, additionalSecretOutputs: ["env"] },
    );
    this.containerName = container.name;
    this.containerId = container.containerId;
    this.running = container.running;
    this.registerOutputs({
      containerName: this.containerName,
      containerId: this.containerId,
      running: this.running,
    });
  }
}
