import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface HostFilesystemArgs {
  /** The sparse ext4 image file; its filesystem's UUID derives from this path. */
  readonly imagePath: pulumi.Input<string>;
  /** Where it is loop-mounted (`nodev,nosuid`); an empty directory or none. */
  readonly mountpoint: pulumi.Input<string>;
  /** The filesystem's size (whole MiB, at least 64 MiB); a larger one grows it online, a smaller one is refused. */
  readonly sizeBytes: pulumi.Input<number>;
  /** Owner and mode of `<mountpoint>/data`, the directory to use. */
  readonly uid: pulumi.Input<number>;
  readonly gid: pulumi.Input<number>;
  readonly mode: pulumi.Input<string>;
  /**
   * Create only: an image file to start from instead of an empty filesystem (a consistent copy of another
   * one, staged beside `imagePath`): moved into place and given this resource's UUID. Later changes are ignored.
   */
  readonly copyFrom?: pulumi.Input<string>;
}

/**
 * A size-limited filesystem on the host: what is written in its `dataPath` fills its own image, never the
 * host's disk. Refresh notices an image gone (deleted) or not mounted (a reboot: the next update mounts it).
 */
export class HostFilesystem extends pulumi.CustomResource {
  declare public readonly imagePath: pulumi.Output<string>;
  declare public readonly mountpoint: pulumi.Output<string>;
  declare public readonly sizeBytes: pulumi.Output<number>;
  declare public readonly uuid: pulumi.Output<string>;
  declare public readonly dataPath: pulumi.Output<string>;

  constructor(name: string, args: HostFilesystemArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.hostFilesystem, name, { ...args, uuid: undefined, dataPath: undefined }, opts);
  }
}
