import * as pulumi from "@pulumi/pulumi";
import { AGENT_UID } from "../../lib/constants.js";
import { DockerVolume } from "../resources/docker-volume.js";
import { HostFilesystem } from "../resources/host-filesystem.js";
import { tenantNames } from "./names.js";

/** A size-limited filesystem of the tenant's own (sandbox:host:Filesystem): its image and mountpoint. */
export interface TenantDisk {
  readonly imagePath: string;
  readonly mountpoint: string;
  readonly sizeBytes: number;
  /** A staged copy of another filesystem's image to start from (a fork's; sandbox:host:Filesystem's `copyFrom`). */
  readonly copyFrom?: string;
}

/** Arguments of {@link TenantStorage}. */
export interface TenantStorageArgs {
  readonly projectId: string;
  readonly labels: Record<string, string>;
  /**
   * The home's own filesystem: the volume binds its data directory, so the agent fills that and never the
   * host's disk, so a full home harms no one else. Absent (tenants made before it): a plain `local` volume
   * on the host's filesystem, kept as it is.
   */
  readonly disk?: TenantDisk;
}

/**
 * The sandbox's `/home/agent`, named by the immutable project id. Independent of the container, so
 * replacing or stopping the container keeps it; only deleting the project (destroying the stack) removes it.
 * No change of the tenant program replaces it (tests/integration/rollout.test.ts).
 */
export class TenantStorage extends pulumi.ComponentResource {
  public readonly volumeName: pulumi.Output<string>;
  /** Where the home's files are on the host (protected paths are bound from here). */
  public readonly mountpoint: pulumi.Output<string>;

  constructor(name: string, args: TenantStorageArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Storage", name, {}, opts);
    const disk = args.disk
      ? new HostFilesystem(
          `${name}-disk`,
          { ...args.disk, uid: AGENT_UID, gid: AGENT_UID, mode: "0755" },
          { parent: this },
        )
      : undefined;
    const volume = new DockerVolume(
      `${name}-home`,
      {
        name: tenantNames(args.projectId).volume,
        labels: args.labels,
        ...(disk ? { driverOpts: { type: "none", o: "bind", device: disk.dataPath } } : {}),
      },
      // An engine cannot relabel a volume: a label change would replace it, and with it the agent's home.
      // Labels are the ones of its creation; a program that adds one gives it to new tenants only.
      { parent: this, ignoreChanges: ["labels"] },
    );
    this.volumeName = volume.name;
    // A bound volume's own mountpoint exists only while a container uses it: the files are in the disk's.
    this.mountpoint = disk ? disk.dataPath : volume.mountpoint;
    this.registerOutputs({ volumeName: this.volumeName, mountpoint: this.mountpoint });
  }
}
