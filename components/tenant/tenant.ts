import * as pulumi from "@pulumi/pulumi";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { declareContainerBackend } from "./container.js";
import { declareKubernetesBackend } from "./kubernetes/backend.js";
import { declareMicroVmBackend } from "./microvm-backend.js";
import { tenantNames } from "./names.js";
import type { TenantArgs, TenantOutputs } from "./outputs.js";
import { isKubernetesSpec, isMicroVmSpec } from "./spec.js";

/**
 * One project's whole sandbox, on the backend its spec names: a container (container.ts) or a microVM
 * (microvm-backend.ts) on the host, each on the same identity, bridge and egress rules (host.ts), the
 * firewall in place before the sandbox starts so it never runs unfiltered; or a Pod on a cluster
 * (kubernetes/backend.ts).
 * Every resource is a child of this component, whichever declares it.
 */
export class Tenant extends pulumi.ComponentResource implements TenantOutputs {
  public readonly containerName: pulumi.Output<string>;
  public readonly sandboxAddress: pulumi.Output<string>;
  public readonly bridge: pulumi.Output<string>;
  public readonly subnet: pulumi.Output<string>;
  public readonly volumeName: pulumi.Output<string>;
  public readonly sshHostPort: pulumi.Output<number>;
  public readonly sshPublicKey: pulumi.Output<string>;
  public readonly sshPrivateKey: pulumi.Output<string | undefined>;
  public readonly backupRemote: pulumi.Output<string>;
  public readonly running: pulumi.Output<boolean>;

  /**
   * `spec.secrets`: the project's secrets with their values (never part of the recorded spec), written
   * into the tenant's secrets directory when the platform has one.
   */
  constructor(name: string, spec: TenantArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Tenant", name, {}, opts);
    const labels = {
      [LABELS.tenant]: spec.projectId,
      ...(spec.ownerLabel === false ? {} : { [LABELS.owner]: spec.ownerId }),
      [LABELS.stack]: tenantNames(spec.projectId).stack,
      [LABELS.managedBy]: MANAGED_BY,
      ...(spec.host.instance === undefined ? {} : { [LABELS.instance]: spec.host.instance }),
    };
    // The spec's schema requires each backend's block with it: a spec that names one has it.
    const outputs = isKubernetesSpec(spec)
      ? declareKubernetesBackend(name, spec, labels, spec.kubeconfig, this)
      : isMicroVmSpec(spec)
        ? declareMicroVmBackend(name, spec, labels, this)
        : declareContainerBackend(name, spec, labels, this);
    this.containerName = outputs.containerName;
    this.sandboxAddress = outputs.sandboxAddress;
    this.bridge = outputs.bridge;
    this.subnet = outputs.subnet;
    this.volumeName = outputs.volumeName;
    this.sshHostPort = outputs.sshHostPort;
    this.sshPublicKey = outputs.sshPublicKey;
    this.sshPrivateKey = outputs.sshPrivateKey;
    this.backupRemote = outputs.backupRemote;
    this.running = outputs.running;
    this.registerOutputs({ ...outputs });
  }
}
