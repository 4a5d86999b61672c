import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link ContainerEngine}; validated by the plugin (provider/resources/container-engine.ts). */
export interface ContainerEngineArgs {
  /** The Docker Engine API socket, e.g. `/var/run/docker.sock`. */
  readonly socket: pulumi.Input<string>;
  readonly logDir: pulumi.Input<string>;
  readonly runDir: pulumi.Input<string>;
}

/**
 * The container engine answering on its API socket: an engine already running there is adopted (and left
 * running on delete), otherwise dockerd is started (and stopped on delete).
 */
export class ContainerEngine extends pulumi.CustomResource {
  declare public readonly socket: pulumi.Output<string>;
  declare public readonly running: pulumi.Output<boolean>;
  declare public readonly version: pulumi.Output<string>;
  declare public readonly apiVersion: pulumi.Output<string>;
  declare public readonly startedPid: pulumi.Output<number>;

  constructor(name: string, args: ContainerEngineArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.containerEngine,
      name,
      { ...args, running: undefined, version: undefined, apiVersion: undefined, startedPid: undefined },
      opts,
    );
  }
}
