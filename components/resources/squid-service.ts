import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link SquidService}; validated by the plugin (provider/resources/squid-service.ts). */
export interface SquidServiceArgs {
  readonly port: pulumi.Input<number>;
  /** The base config file (written by a `HostFile`). */
  readonly config: pulumi.Input<string>;
  readonly pidFile: pulumi.Input<string>;
  readonly logDir: pulumi.Input<string>;
  /** The config file's declared content hash (`HostFile.sha256`): a change reconfigures Squid. */
  readonly configSha256: pulumi.Input<string>;
}

/** The project's Squid instance, running from its base config; refresh sees it stopped or its config edited. */
export class SquidService extends pulumi.CustomResource {
  declare public readonly port: pulumi.Output<number>;
  declare public readonly running: pulumi.Output<boolean>;
  declare public readonly pid: pulumi.Output<number>;
  declare public readonly configFileSha256: pulumi.Output<string>;

  constructor(name: string, args: SquidServiceArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.squidService,
      name,
      { ...args, running: undefined, pid: undefined, configFileSha256: undefined },
      opts,
    );
  }
}
