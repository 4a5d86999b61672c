import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link DockerNetwork}; validated by the plugin's `check` (provider/resources/docker-network.ts). */
export interface DockerNetworkArgs {
  readonly name: pulumi.Input<string>;
  /** IPv4 CIDR of the network, e.g. `10.100.3.0/24`. */
  readonly subnet: pulumi.Input<string>;
  /** Gateway address inside `subnet`; the host's side of the bridge. */
  readonly gateway: pulumi.Input<string>;
  /** Linux bridge interface name (≤ 15 characters), which the egress rules key on. */
  readonly bridgeName: pulumi.Input<string>;
  /** No route out of the bridge at all. */
  readonly internal?: pulumi.Input<boolean>;
  readonly labels?: pulumi.Input<Record<string, pulumi.Input<string>>>;
}

/**
 * A Docker bridge network with IPv6 off. Any change replaces it (the engine cannot edit networks);
 * `refresh` notices a network removed behind Pulumi's back.
 */
export class DockerNetwork extends pulumi.CustomResource {
  declare public readonly name: pulumi.Output<string>;
  declare public readonly subnet: pulumi.Output<string>;
  declare public readonly gateway: pulumi.Output<string>;
  declare public readonly bridgeName: pulumi.Output<string>;
  declare public readonly internal: pulumi.Output<boolean>;
  declare public readonly labels: pulumi.Output<Record<string, string>>;
  declare public readonly networkId: pulumi.Output<string>;

  constructor(name: string, args: DockerNetworkArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.dockerNetwork, name, { ...args, networkId: undefined }, opts);
  }
}
