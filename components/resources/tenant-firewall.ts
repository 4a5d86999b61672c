import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface TenantFirewallArgs {
  readonly tenantId: pulumi.Input<string>;
  readonly bridge: pulumi.Input<string>;
  readonly subnet: pulumi.Input<string>;
  readonly gateway: pulumi.Input<string>;
  readonly proxyPort: pulumi.Input<number>;
  readonly sshPort?: pulumi.Input<number>;
  /** The credential gateway's port on the tenant's gateway address (an ACCEPT like the proxy's). */
  readonly gatewayPort?: pulumi.Input<number>;
  /** The platform instance, put in every rule's comment (`agent-sandbox:tenant=<id>:instance=<instance>`). */
  readonly instance?: pulumi.Input<string>;
}

/** A tenant's iptables rules in SANDBOX-INPUT/SANDBOX-FORWARD; refresh lists any that went missing. */
export class TenantFirewall extends pulumi.CustomResource {
  declare public readonly rules: pulumi.Output<string[]>;
  declare public readonly missing: pulumi.Output<string[]>;

  constructor(name: string, args: TenantFirewallArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.tenantFirewall, name, { ...args, rules: undefined, missing: undefined }, opts);
  }
}
