import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";

/** Arguments of {@link HostAddress}. */
export interface HostAddressArgs {
  readonly project: string;
  readonly region: string;
  readonly labels: Record<string, string>;
}

/**
 * The host's static external address. Its own resource, outliving VM replacements: clients keep the
 * `apiUrl` and sandboxes' SSH endpoints, and the runtime's `publicHost` is known before the VM exists.
 */
export class HostAddress extends pulumi.ComponentResource {
  public readonly address: pulumi.Output<string>;

  constructor(name: string, args: HostAddressArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:HostAddress", name, {}, opts);
    const address = new gcp.compute.Address(
      `${name}-ip`,
      {
        project: args.project,
        region: args.region,
        addressType: "EXTERNAL",
        networkTier: "PREMIUM",
        description: "Agent sandbox host: API, terminal and sandbox SSH endpoint",
        labels: args.labels,
      },
      { parent: this },
    );
    this.address = address.address;
    this.registerOutputs({ address: this.address });
  }
}
