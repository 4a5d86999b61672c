import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface DockerVolumeArgs {
  readonly name: pulumi.Input<string>;
  readonly labels?: pulumi.Input<Record<string, pulumi.Input<string>>>;
}

/** A named Docker volume; never adopts a foreign volume of the same name. */
export class DockerVolume extends pulumi.CustomResource {
  declare public readonly name: pulumi.Output<string>;
  declare public readonly labels: pulumi.Output<Record<string, string>>;
  declare public readonly mountpoint: pulumi.Output<string>;

  constructor(name: string, args: DockerVolumeArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.dockerVolume, name, { ...args, mountpoint: undefined }, opts);
  }
}
