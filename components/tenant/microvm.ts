import * as pulumi from "@pulumi/pulumi";
import { MicroVm } from "../resources/microvm.js";
import { GCS_TOKEN_FILE, sandboxEnv, type TenantSandboxArgs } from "./sandbox.js";
import type { MicroVmTenantSpec } from "./spec.js";

/** A nested project's block (the spec's `microvm.nested`): the guest's CPU flag and its size's caps. */
export type MicroVmNested = NonNullable<MicroVmTenantSpec["microvm"]["nested"]>;

/**
 * The VM's vCPUs and memory: the project's limits (its CPUs rounded up), held to the caps when it runs VMs
 * of its own, whatever its limits say: everything those VMs use comes out of it.
 */
export function microVmSize(
  limits: { readonly cpus: number; readonly memoryMiB: number },
  nested?: Pick<MicroVmNested, "maxMemoryMiB" | "maxVcpus">,
): { vcpus: number; memoryMiB: number } {
  const vcpus = Math.max(1, Math.ceil(limits.cpus));
  return nested
    ? { vcpus: Math.min(vcpus, nested.maxVcpus), memoryMiB: Math.min(limits.memoryMiB, nested.maxMemoryMiB) }
    : { vcpus, memoryMiB: limits.memoryMiB };
}

/** The home disk of a microVM whose spec sets no `homeBytes`: the container backend's default size. */
export const MICROVM_DEFAULT_HOME_MIB = 10 * 1024;

/** Arguments of {@link TenantMicroVm}: the container's, less what only a container has. */
export interface TenantMicroVmArgs extends Pick<
  TenantSandboxArgs,
  | "projectId"
  | "image"
  | "gateway"
  | "proxyPort"
  | "sshPublicKey"
  | "backupRemote"
  | "backupIntervalSeconds"
  | "backupAfterChangeSeconds"
  | "credentialGateway"
  | "limits"
  | "running"
  | "sshHostPort"
  | "gcsTokenFile"
  | "protectedPaths"
> {
  /** The tenant's bridge (its Docker network's), and the sandbox's address on it. */
  readonly bridge: pulumi.Input<string>;
  readonly address: pulumi.Input<string>;
  readonly kernel: string;
  readonly initrd: string;
  readonly accelerator: "kvm" | "tcg";
  /** The VM's directory: its disks, console log and QMP socket. */
  readonly stateDir: string;
  /** The runtime's key, for the terminal and exec over the guest's sshd. */
  readonly platformKey: string;
  /** /run/secrets's files (components/tenant/secrets.ts `secretFiles`), a secret. */
  readonly files: pulumi.Input<Record<string, string>>;
  readonly homeSizeMiB: number;
  /** A fork's home (the spec's `homeCopyFrom`): its source's, staged in the VM's directory. */
  readonly homeCopyFrom?: string;
  /** A stop keeps the guest's memory, and the next start resumes it (sandbox:vm:MicroVM's `keepMemory`). */
  readonly keepMemory?: boolean;
  /** The backup disk a local backup remote writes to; none on GCP (the remote is the bucket). */
  readonly backupSizeMiB?: number;
  /** Nested virtualisation (the spec's `microvm.nested`): the guest's CPU flag, and the caps on its size. */
  readonly nested?: MicroVmNested;
}

/**
 * The sandbox as a microVM with its own kernel: the same image, environment, address, proxy and
 * keys as the container backend, so the tenant's firewall chains and Squid allowlist apply unchanged.
 */
export class TenantMicroVm extends pulumi.ComponentResource {
  public readonly running: pulumi.Output<boolean>;
  public readonly stateDir: pulumi.Output<string>;

  constructor(name: string, args: TenantMicroVmArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:MicroVm", name, {}, opts);
    const vm = new MicroVm(
      `${name}-vm`,
      {
        stateDir: args.stateDir,
        image: args.image,
        kernel: args.kernel,
        initrd: args.initrd,
        accelerator: args.accelerator,
        ...microVmSize(args.limits, args.nested),
        ...(args.nested ? { nested: args.nested.cpuFlag } : {}),
        homeSizeMiB: args.homeSizeMiB,
        ...(args.homeCopyFrom === undefined ? {} : { homeCopyFrom: args.homeCopyFrom }),
        backupSizeMiB: args.backupSizeMiB,
        bridge: args.bridge,
        address: pulumi.interpolate`${args.address}/24`,
        gateway: args.gateway,
        authorizedKeys: [args.sshPublicKey, args.platformKey],
        // Root may run the final backup before a stop or snapshot (runtime/tenants/snapshots.ts), nothing else.
        rootKeys: [args.platformKey],
        env: {
          ...sandboxEnv(args),
          // On GCP the runtime installs the tenant's token there and renews it (a guest cannot mount the
          // host's copy): runtime/gcp/guest-token.ts, the guest's sandbox-platform-command.
          ...(args.gcsTokenFile ? { GCS_TOKEN_FILE: `/run/secrets/${GCS_TOKEN_FILE}` } : {}),
        },
        sshHostPort: args.sshHostPort,
        protectedPaths: [...args.protectedPaths],
        files: pulumi.secret(args.files),
        running: args.running,
        ...(args.keepMemory ? { keepMemory: true } : {}),
      },
      { parent: this, additionalSecretOutputs: ["files"] },
    );
    this.running = vm.running;
    this.stateDir = vm.stateDir;
    this.registerOutputs({ running: this.running, stateDir: this.stateDir });
  }
}
