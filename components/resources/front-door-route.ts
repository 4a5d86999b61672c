import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface FrontDoorRouteArgs {
  readonly routeId: pulumi.Input<string>;
  readonly adminPort: pulumi.Input<number>;
  readonly projectId: pulumi.Input<string>;
  readonly hosts: pulumi.Input<pulumi.Input<string>[]>;
  /** `<sandbox address>:<port>` on the tenant's bridge. */
  readonly upstream: pulumi.Input<string>;
  /** The runtime that forward-auth asks (`127.0.0.1:<api port>`). */
  readonly authUpstream: pulumi.Input<string>;
}

/** One front-door route in the host's Caddy (provider/resources/front-door-route.ts). */
export class FrontDoorRoute extends pulumi.CustomResource {
  declare public readonly route: pulumi.Output<string>;
  declare public readonly hosts: pulumi.Output<string[]>;

  constructor(name: string, args: FrontDoorRouteArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.frontDoorRoute, name, { ...args, route: undefined }, opts);
  }
}
