import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link HostFile}; validated by the plugin's `check` (provider/resources/host-file.ts). */
export interface HostFileArgs {
  /** Absolute path on the host running the plugin. */
  readonly path: pulumi.Input<string>;
  readonly content: pulumi.Input<string>;
  /** Octal permission bits, default `0644`. */
  readonly mode?: pulumi.Input<string>;
}

/**
 * A file on the host, written atomically. `refresh` reads it back, so a hand edit shows up as drift.
 */
export class HostFile extends pulumi.CustomResource {
  declare public readonly path: pulumi.Output<string>;
  declare public readonly content: pulumi.Output<string>;
  declare public readonly mode: pulumi.Output<string>;
  declare public readonly sha256: pulumi.Output<string>;

  constructor(name: string, args: HostFileArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.hostFile, name, { ...args, sha256: undefined }, opts);
  }
}
