import type * as pulumi from "@pulumi/pulumi";
import type { TenantSecret } from "./secrets.js";
import type { TenantSpec } from "./spec.js";

/** What the tenant program reads back from a tenant, whichever backend runs it (stacks/tenant/program.ts). */
export interface TenantOutputs {
  readonly containerName: pulumi.Output<string>;
  readonly sandboxAddress: pulumi.Output<string>;
  readonly bridge: pulumi.Output<string>;
  readonly subnet: pulumi.Output<string>;
  readonly volumeName: pulumi.Output<string>;
  readonly sshHostPort: pulumi.Output<number>;
  readonly sshPublicKey: pulumi.Output<string>;
  readonly sshPrivateKey: pulumi.Output<string | undefined>;
  readonly backupRemote: pulumi.Output<string>;
  readonly running: pulumi.Output<boolean>;
}

/** A tenant's spec with what comes beside it, never recorded in it. */
export type TenantArgs = TenantSpec & {
  /** The project's secrets with their values, written into the tenant's secrets directory (or the guest). */
  readonly secrets?: readonly TenantSecret[];
  /** Backend `kubernetes`: the cluster's kubeconfig (else the stack's secret config `kubeconfig`). */
  readonly kubeconfig?: pulumi.Input<string>;
};
