import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { GCP } from "../../lib/constants.js";
import { gcpNestedVirtualizationProblem } from "../../lib/microvm/nested.js";
import { DATA_DISK_DEVICE } from "./startup-script.js";

/**
 * The VM's OAuth scope. Google's guidance: the broad scope, with the service account's IAM roles doing the
 * limiting (the account here has no project-level role at all; see HostIdentity).
 */
export const HOST_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"] as const;

/** Arguments of {@link HostVm}. */
export interface HostVmArgs {
  readonly project: string;
  readonly region: string;
  readonly zone: string;
  readonly machineType: string;
  readonly image: string;
  readonly bootDiskSizeGb: number;
  readonly dataDiskSizeGb: number;
  readonly subnetworkId: pulumi.Input<string>;
  readonly serviceAccountEmail: pulumi.Input<string>;
  /** The static external address (HostAddress). */
  readonly address: pulumi.Input<string>;
  /** The rendered startup script (components/gcp/startup-script.ts). */
  readonly startupScript: pulumi.Input<string>;
  readonly labels: Record<string, string>;
  /**
   * Nested virtualization (`advancedMachineFeatures.enableNestedVirtualization`), for microVM sandboxes under
   * KVM (gcp.microvm): the host's guests get VT-x from Compute Engine. An Intel machine series only.
   */
  readonly nestedVirtualization?: boolean;
}

export function validateHostVmArgs(args: HostVmArgs): string[] {
  const problems: string[] = [];
  if (!args.zone.startsWith(`${args.region}-`))
    problems.push(`zone ${args.zone} is not in region ${args.region}`);
  if (args.bootDiskSizeGb < 20) problems.push(`bootDiskSizeGb ${args.bootDiskSizeGb} < 20`);
  if (args.dataDiskSizeGb < 10) problems.push(`dataDiskSizeGb ${args.dataDiskSizeGb} < 10`);
  const nested = args.nestedVirtualization ? gcpNestedVirtualizationProblem(args.machineType) : undefined;
  if (nested !== undefined) problems.push(`nestedVirtualization: machineType ${nested}`);
  return problems;
}

/**
 * The sandbox host: a Compute Engine VM on the static address, its own service account, OS Login for
 * admins, Shielded VM, and a separate persistent data disk. The VM is throwaway (a changed startup script
 * replaces it); the data disk (Postgres, Docker's data root with tenant volumes) is protected and survives.
 */
export class HostVm extends pulumi.ComponentResource {
  public readonly externalIp: pulumi.Output<string>;
  public readonly instanceName: pulumi.Output<string>;
  public readonly dataDiskName: pulumi.Output<string>;

  constructor(name: string, args: HostVmArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:HostVm", name, {}, opts);
    const problems = validateHostVmArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const dataDisk = new gcp.compute.Disk(
      `${name}-data`,
      {
        project: args.project,
        zone: args.zone,
        type: "pd-balanced",
        size: args.dataDiskSizeGb,
        labels: args.labels,
      },
      { parent: this, protect: true },
    );
    const instance = new gcp.compute.Instance(
      `${name}-vm`,
      {
        project: args.project,
        zone: args.zone,
        machineType: args.machineType,
        description: "Agent sandbox host: Docker, Squid, the runtime service and Postgres",
        tags: [GCP.hostTag],
        labels: args.labels,
        bootDisk: {
          autoDelete: true,
          initializeParams: { image: args.image, size: args.bootDiskSizeGb, type: "pd-balanced" },
        },
        attachedDisks: [{ source: dataDisk.id, deviceName: DATA_DISK_DEVICE, mode: "READ_WRITE" }],
        networkInterfaces: [
          {
            subnetwork: args.subnetworkId,
            accessConfigs: [{ natIp: args.address, networkTier: "PREMIUM" }],
          },
        ],
        serviceAccount: { email: args.serviceAccountEmail, scopes: [...HOST_SCOPES] },
        shieldedInstanceConfig: { enableSecureBoot: true, enableVtpm: true, enableIntegrityMonitoring: true },
        canIpForward: false,
        // The host's own KVM for microVM guests (a machine series that has it: stacks/config.ts).
        ...(args.nestedVirtualization
          ? { advancedMachineFeatures: { enableNestedVirtualization: true } }
          : {}),
        metadata: {
          // Admin SSH through OS Login (IAM-controlled, audited); no project-wide keys on the host.
          "enable-oslogin": "TRUE",
          "block-project-ssh-keys": "TRUE",
        },
        metadataStartupScript: args.startupScript,
        allowStoppingForUpdate: true,
      },
      // The data disk attaches READ_WRITE to one VM at a time: the old VM must go before its replacement.
      { parent: this, deleteBeforeReplace: true },
    );
    this.externalIp = pulumi.output(args.address);
    this.instanceName = instance.name;
    this.dataDiskName = dataDisk.name;
    this.registerOutputs({
      externalIp: this.externalIp,
      instanceName: this.instanceName,
      dataDiskName: this.dataDiskName,
    });
  }
}
