import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface SquidTenantArgs {
  readonly tenantId: pulumi.Input<string>;
  readonly subnet: pulumi.Input<string>;
  readonly domains: pulumi.Input<pulumi.Input<string>[]>;
  /** The Squid base config that includes `fragmentsDir/*.conf`. */
  readonly configFile: pulumi.Input<string>;
  readonly fragmentsDir: pulumi.Input<string>;
}

/** A tenant's Squid fragment and domain list, validated before they replace anything, then reloaded. */
export class SquidTenant extends pulumi.CustomResource {
  declare public readonly fragment: pulumi.Output<string>;
  declare public readonly domainsFile: pulumi.Output<string>;
  declare public readonly fragmentText: pulumi.Output<string>;
  declare public readonly domainsText: pulumi.Output<string>;

  constructor(name: string, args: SquidTenantArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.squidTenant,
      name,
      {
        ...args,
        fragment: undefined,
        domainsFile: undefined,
        fragmentText: undefined,
        domainsText: undefined,
      },
      opts,
    );
  }
}
