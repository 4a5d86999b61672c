import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link CaddyService}; validated by the plugin (provider/resources/caddy-service.ts). */
export interface CaddyServiceArgs {
  readonly port: pulumi.Input<number>;
  readonly adminPort: pulumi.Input<number>;
  readonly configDir: pulumi.Input<string>;
  readonly logDir: pulumi.Input<string>;
  readonly runDir: pulumi.Input<string>;
}

/** The front door's Caddy on loopback; refresh sees it stopped (its tenants' routes are then gone too). */
export class CaddyService extends pulumi.CustomResource {
  declare public readonly port: pulumi.Output<number>;
  declare public readonly running: pulumi.Output<boolean>;
  declare public readonly pid: pulumi.Output<number>;

  constructor(name: string, args: CaddyServiceArgs, opts?: pulumi.CustomResourceOptions) {
    super(RESOURCE_TYPES.caddyService, name, { ...args, running: undefined, pid: undefined }, opts);
  }
}
