import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

/** Inputs of {@link RegistryService}; validated by the plugin (provider/resources/registry-service.ts). */
export interface RegistryServiceArgs {
  readonly port: pulumi.Input<number>;
  /** The registry's config file (written by a `HostFile`). */
  readonly config: pulumi.Input<string>;
  readonly storageDir: pulumi.Input<string>;
  readonly pidFile: pulumi.Input<string>;
  readonly logFile: pulumi.Input<string>;
  /** The config file's declared content hash (`HostFile.sha256`): a change restarts the registry. */
  readonly configSha256: pulumi.Input<string>;
}

/** The local image registry (docker-registry on loopback); refresh sees it stopped or its config edited. */
export class RegistryService extends pulumi.CustomResource {
  declare public readonly port: pulumi.Output<number>;
  declare public readonly running: pulumi.Output<boolean>;
  declare public readonly pid: pulumi.Output<number>;
  declare public readonly configFileSha256: pulumi.Output<string>;

  constructor(name: string, args: RegistryServiceArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.registryService,
      name,
      { ...args, running: undefined, pid: undefined, configFileSha256: undefined },
      opts,
    );
  }
}
