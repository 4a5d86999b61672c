import * as pulumi from "@pulumi/pulumi";
import { parseCidr } from "../../lib/ipv4.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { DockerNetwork } from "../resources/docker-network.js";
import { tenantNames } from "./names.js";

/** Arguments of {@link TenantNetwork}. */
export interface TenantNetworkArgs {
  readonly projectId: string;
  /** The tenant's own /24, allocated by the runtime from the configured pool. */
  readonly subnet: string;
  readonly labels: Record<string, string>;
}

export function validateTenantNetworkArgs(args: TenantNetworkArgs): string[] {
  return parseCidr(args.subnet)?.prefix === 24 ? [] : [`subnet ${args.subnet} must be an IPv4 /24`];
}

/** A dedicated bridge per tenant, IPv6 off: the only network its sandbox is attached to. */
export class TenantNetwork extends pulumi.ComponentResource {
  public readonly networkName: pulumi.Output<string>;
  public readonly bridge: pulumi.Output<string>;
  public readonly subnet: pulumi.Output<string>;
  public readonly gateway: pulumi.Output<string>;
  public readonly sandboxAddress: pulumi.Output<string>;

  constructor(name: string, args: TenantNetworkArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Network", name, {}, opts);
    const problems = validateTenantNetworkArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const names = tenantNames(args.projectId);
    const { gateway, sandbox } = tenantAddresses(args.subnet);
    const network = new DockerNetwork(
      `${name}-bridge`,
      { name: names.network, subnet: args.subnet, gateway, bridgeName: names.bridge, labels: args.labels },
      { parent: this },
    );
    this.networkName = network.name;
    this.bridge = network.bridgeName;
    this.subnet = network.subnet;
    this.gateway = network.gateway;
    this.sandboxAddress = pulumi.output(sandbox);
    this.registerOutputs({
      networkName: this.networkName,
      bridge: this.bridge,
      subnet: this.subnet,
      gateway: this.gateway,
      sandboxAddress: this.sandboxAddress,
    });
  }
}
