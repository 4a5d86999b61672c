import * as pulumi from "@pulumi/pulumi";
import { DockerVolume } from "../resources/docker-volume.js";
import { tenantNames } from "./names.js";

/** Arguments of {@link TenantStorage}. */
export interface TenantStorageArgs {
  readonly projectId: string;
  readonly labels: Record<string, string>;
}

/**
 * The sandbox's `/home/agent`, named by the immutable project id. Independent of the container, so
 * replacing or stopping the container keeps it; only deleting the project (destroying the stack) removes it.
 * No change of the tenant program replaces it (tests/integration/rollout.test.ts).
 */
export class TenantStorage extends pulumi.ComponentResource {
  public readonly volumeName: pulumi.Output<string>;
  public readonly mountpoint: pulumi.Output<string>;

  constructor(name: string, args: TenantStorageArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Storage", name, {}, opts);
    const volume = new DockerVolume(
      `${name}-home`,
      { name: tenantNames(args.projectId).volume, labels: args.labels },
      // An engine cannot relabel a volume: a label change would replace it, and with it the agent's home.
      // Labels are the ones of its creation; a program that adds one gives it to new tenants only.
      { parent: this, ignoreChanges: ["labels"] },
    );
    this.volumeName = volume.name;
    this.mountpoint = volume.mountpoint;
    this.registerOutputs({ volumeName: this.volumeName, mountpoint: this.mountpoint });
  }
}
