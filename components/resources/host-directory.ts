import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface HostDirectoryArgs {
  readonly path: pulumi.Input<string>;
  readonly uid: pulumi.Input<number>;
  readonly gid: pulumi.Input<number>;
  readonly mode: pulumi.Input<string>;
  /** Remove the contents with the directory; otherwise a non-empty directory is left in place. */
  readonly deleteContents?: pulumi.Input<boolean>;
}

/** A host directory with owner and mode; refresh notices it removed or re-permissioned. */
export class HostDirectory extends pulumi.CustomResource {
  declare public readonly path: pulumi.Output<string>;

  constructor(name: string, args: HostDirectoryArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.hostDirectory, name, { ...args }, opts);
  }
}
