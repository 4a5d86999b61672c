import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface TrafficShaperArgs {
  readonly tenantId: pulumi.Input<string>;
  /** The tenant's bridge interface (its Docker network's `com.docker.network.bridge.name`). */
  readonly bridge: pulumi.Input<string>;
  /** What the bridge sends towards the sandbox (its downloads), in kbit/s; absent: not shaped. */
  readonly downloadKbps?: pulumi.Input<number>;
  /** What the sandbox sends (its uploads), in kbit/s; absent: not shaped. */
  readonly uploadKbps?: pulumi.Input<number>;
}

/** A tenant's bandwidth caps, tc qdiscs on its bridge; refresh lists any cap tc no longer holds. */
export class TrafficShaper extends pulumi.CustomResource {
  declare public readonly observed: pulumi.Output<{ downloadKbps?: number; uploadKbps?: number }>;
  declare public readonly missing: pulumi.Output<string[]>;

  constructor(name: string, args: TrafficShaperArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.trafficShaper, name, { ...args, observed: undefined, missing: undefined }, opts);
  }
}
