import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface MicroVmArgs {
  /** The VM's own directory (disks, console, pidfile): its identity; a new one replaces the VM. */
  readonly stateDir: pulumi.Input<string>;
  /** The sandbox image (local to the engine) whose filesystem is the VM's root. */
  readonly image: pulumi.Input<string>;
  readonly kernel: pulumi.Input<string>;
  readonly initrd: pulumi.Input<string>;
  readonly accelerator: pulumi.Input<"kvm" | "tcg">;
  /** Nested virtualisation: the guest gets the host's CPU with this flag (`-cpu host,+vmx`); KVM only. */
  readonly nested?: pulumi.Input<"vmx" | "svm">;
  readonly vcpus: pulumi.Input<number>;
  readonly memoryMiB: pulumi.Input<number>;
  readonly homeSizeMiB: pulumi.Input<number>;
  /** A fork's home: its source's, copied and staged by the runtime, taken over by the first boot. */
  readonly homeCopyFrom?: pulumi.Input<string>;
  readonly backupSizeMiB?: pulumi.Input<number>;
  /** The Linux bridge its tap device joins, and its `ADDR/PREFIX` and gateway there. */
  readonly bridge: pulumi.Input<string>;
  readonly address: pulumi.Input<string>;
  readonly gateway: pulumi.Input<string>;
  readonly authorizedKeys: pulumi.Input<pulumi.Input<string>[]>;
  /** Keys root may log in with, only to run the guest's forced command (the platform's final backup). */
  readonly rootKeys?: pulumi.Input<pulumi.Input<string>[]>;
  readonly env?: pulumi.Input<Record<string, pulumi.Input<string>>>;
  /** Files for the guest's /run/secrets: pass them as a secret (the project's secrets are in them). */
  readonly files?: pulumi.Input<Record<string, pulumi.Input<string>>>;
  /** Paths under /home/agent the agent may not change, read-only from each boot (the spec's protectedPaths). */
  readonly protectedPaths?: pulumi.Input<pulumi.Input<string>[]>;
  /** The host port forwarded to the guest's sshd (the project's SSH port). */
  readonly sshHostPort?: pulumi.Input<number>;
  readonly running?: pulumi.Input<boolean>;
  /** A stop suspends it with its memory kept (processes, tmux), and the next start resumes it. */
  readonly keepMemory?: pulumi.Input<boolean>;
  readonly bootTimeoutMs?: pulumi.Input<number>;
}

/**
 * A sandbox as a microVM (provider/resources/microvm.ts). Refresh sees a killed VM (`running` false) or a
 * missing disk, and the next update boots it again; a changed image, size, key or environment restarts it
 * with its home and backup disks kept.
 */
export class MicroVm extends pulumi.CustomResource {
  declare public readonly stateDir: pulumi.Output<string>;
  declare public readonly running: pulumi.Output<boolean>;
  declare public readonly tap: pulumi.Output<string>;
  declare public readonly rootfs: pulumi.Output<string>;
  declare public readonly pid: pulumi.Output<number | undefined>;

  constructor(name: string, args: MicroVmArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.microVm,
      name,
      { ...args, tap: undefined, rootfs: undefined, pid: undefined, disks: undefined },
      opts,
    );
  }
}
