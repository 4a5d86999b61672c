import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface ContainerMount {
  readonly type: "volume" | "bind" | "tmpfs";
  readonly source?: pulumi.Input<string>;
  readonly target: string;
  readonly readOnly?: boolean;
  /** tmpfs only: its size (ENOSPC past it) and its root's mode (0o1777 for /tmp). */
  readonly tmpfs?: { readonly sizeBytes: number; readonly mode: number };
}

export interface ContainerPort {
  readonly containerPort: number;
  readonly hostPort: pulumi.Input<number>;
  readonly hostIp?: string;
}

/** Inputs of {@link DockerContainer}; the plugin refuses SYS_ADMIN, ALL and the engine socket. */
export interface DockerContainerArgs {
  readonly name: pulumi.Input<string>;
  readonly image: pulumi.Input<string>;
  readonly env?: pulumi.Input<Record<string, pulumi.Input<string>>>;
  readonly labels?: pulumi.Input<Record<string, pulumi.Input<string>>>;
  readonly memoryBytes: pulumi.Input<number>;
  readonly nanoCpus: pulumi.Input<number>;
  readonly pidsLimit: pulumi.Input<number>;
  /** Added back after every capability is dropped. */
  readonly capAdd?: pulumi.Input<pulumi.Input<string>[]>;
  readonly network: pulumi.Input<string>;
  readonly ipv4Address: pulumi.Input<string>;
  readonly dns?: pulumi.Input<pulumi.Input<string>[]>;
  readonly mounts?: pulumi.Input<pulumi.Input<ContainerMount>[]>;
  readonly ports?: pulumi.Input<pulumi.Input<ContainerPort>[]>;
  /** Desired run state; changing it starts or stops the container in place. */
  readonly running?: pulumi.Input<boolean>;
  /** The engine's OCI runtime for it (`runsc`: gVisor); the engine's default when absent. A change replaces it. */
  readonly runtime?: pulumi.Input<string>;
}

/** A hardened container (all capabilities dropped but `capAdd`, no-new-privileges, never privileged). */
export class DockerContainer extends pulumi.CustomResource {
  declare public readonly name: pulumi.Output<string>;
  declare public readonly image: pulumi.Output<string>;
  declare public readonly running: pulumi.Output<boolean>;
  declare public readonly ipv4Address: pulumi.Output<string>;
  declare public readonly containerId: pulumi.Output<string>;
  declare public readonly imageId: pulumi.Output<string>;

  constructor(name: string, args: DockerContainerArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.dockerContainer,
      name,
      { ...args, containerId: undefined, imageId: undefined },
      opts,
    );
  }
}
