import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link FirewallBaseline}; validated by the plugin (provider/resources/firewall-baseline.ts). */
export interface FirewallBaselineArgs {
  readonly inputChain: pulumi.Input<string>;
  readonly forwardChain: pulumi.Input<string>;
  /** iptables interface match of tenant bridges, e.g. `sbx-+`. */
  readonly bridgeMatch: pulumi.Input<string>;
}

/**
 * The project's iptables chains, the jumps into them, the metadata block and the IPv6 drop. Refresh lists
 * what went missing (a flushed chain, a deleted jump) in `missing`; `up` puts it back.
 */
export class FirewallBaseline extends pulumi.CustomResource {
  declare public readonly inputChain: pulumi.Output<string>;
  declare public readonly forwardChain: pulumi.Output<string>;
  declare public readonly rules: pulumi.Output<string[]>;
  declare public readonly missing: pulumi.Output<string[]>;

  constructor(name: string, args: FirewallBaselineArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.firewallBaseline, name, { ...args, rules: undefined, missing: undefined }, opts);
  }
}
