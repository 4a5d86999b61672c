// Nested virtualisation for microVM guests: whether this host can hand its KVM on to a guest (so the agent
// runs VMs of its own inside the sandbox), decided from what the host's kernel says and from what the
// accelerator probe (probe.ts) saw KVM do.
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { exists } from "../files.js";
import type { AcceleratorDecision } from "./probe.js";

/** The CPU flag a guest gets for its own KVM: Intel's VT-x or AMD's AMD-V. */
export type NestedCpuFlag = "vmx" | "svm";

/** The KVM module of each flag's vendor, whose `nested` parameter says whether guests may have VT-x/AMD-V. */
export const NESTED_KVM_MODULE: Readonly<Record<NestedCpuFlag, string>> = {
  vmx: "kvm_intel",
  svm: "kvm_amd",
};

/** What the host's kernel says of its virtualisation, read under `root` ("/" on a host, a fake tree in tests). */
export interface NestedHostFacts {
  /** `vmx` or `svm` in /proc/cpuinfo's flags; undefined: neither (no hardware virtualisation to hand on). */
  readonly cpuFlag?: NestedCpuFlag;
  /** /dev/kvm is there. */
  readonly kvmDevice: boolean;
  /** The KVM modules loaded, as /sys/module names them (`kvm`, `kvm_intel`, `kvm_amd`, `kvm_pvm`...). */
  readonly kvmModules: readonly string[];
  /** The vendor module's `nested` parameter as read (`Y`, `1`, `N`, `0`); undefined: no such file. */
  readonly nestedParameter?: string;
}

/** What a guest may have: its CPU's flag and why, or why not. */
export type NestedSupport =
  | { readonly available: true; readonly cpuFlag: NestedCpuFlag; readonly reason: string }
  | { readonly available: false; readonly reason: string };

/** The largest microVM a nested project gets (`tenants.nestedVirtualization`): its own VMs live inside it. */
export interface NestedCaps {
  readonly memoryMiB: number;
  readonly vcpus: number;
}
export const NESTED_DEFAULT_CAPS: NestedCaps = { memoryMiB: 4096, vcpus: 2 };

/** Reads the facts under `root`; a file that is not there is a fact too (never an error). */
export async function readNestedHostFacts(root = "/"): Promise<NestedHostFacts> {
  const under = (...parts: string[]) => path.join(root, ...parts);
  const cpuinfo = await fs.readFile(under("proc/cpuinfo"), "utf8").catch(() => "");
  // The first processor's flags speak for all: a host's CPUs are alike.
  const flags = new Set((/^flags\s*:(.*)$/m.exec(cpuinfo)?.[1] ?? "").trim().split(/\s+/));
  const cpuFlag = flags.has("vmx") ? "vmx" : flags.has("svm") ? "svm" : undefined;
  const kvmModules = (await fs.readdir(under("sys/module")).catch(() => [] as string[]))
    .filter((name) => name === "kvm" || name.startsWith("kvm_"))
    .sort();
  const nestedParameter =
    cpuFlag === undefined
      ? undefined
      : (
          await fs
            .readFile(under("sys/module", NESTED_KVM_MODULE[cpuFlag], "parameters/nested"), "utf8")
            .catch(() => undefined)
        )?.trim();
  return {
    ...(cpuFlag === undefined ? {} : { cpuFlag }),
    kvmDevice: await exists(under("dev/kvm")),
    kvmModules,
    ...(nestedParameter === undefined ? {} : { nestedParameter }),
  };
}

/**
 * Whether guests get KVM of their own here. Only where the microVM backend itself runs under KVM: a guest's
 * VT-x/AMD-V is the host's, handed on by the host's KVM (`-cpu host,+vmx`), which TCG cannot do. The first
 * thing missing is the reason, from the CPU up to the probe's own run.
 */
export function decideNested(
  facts: NestedHostFacts,
  probe: Pick<AcceleratorDecision, "accelerator" | "reason">,
): NestedSupport {
  const modules = facts.kvmModules.length > 0 ? facts.kvmModules.join(", ") : "none";
  if (facts.cpuFlag === undefined)
    return {
      available: false,
      reason: `the host's CPU shows neither vmx nor svm in /proc/cpuinfo (KVM modules loaded: ${modules}): no hardware virtualisation to hand on to a guest`,
    };
  if (!facts.kvmDevice) return { available: false, reason: "no /dev/kvm: KVM is not loaded on this host" };
  const module = NESTED_KVM_MODULE[facts.cpuFlag];
  if (facts.nestedParameter === undefined)
    return {
      available: false,
      reason: `${module} is not loaded (KVM modules loaded: ${modules}), so its guests cannot have ${facts.cpuFlag}`,
    };
  if (facts.nestedParameter !== "Y" && facts.nestedParameter !== "1")
    return {
      available: false,
      reason: `${module}'s nested parameter is ${facts.nestedParameter}: the host's KVM hands ${facts.cpuFlag} on to no guest (options ${module} nested=1, then reload ${module})`,
    };
  if (probe.accelerator !== "kvm")
    return {
      available: false,
      reason: `the microVM backend runs its guests under ${probe.accelerator} here (${probe.reason}); only a guest of the host's KVM can have KVM of its own`,
    };
  return {
    available: true,
    cpuFlag: facts.cpuFlag,
    reason: `${module} nested=${facts.nestedParameter} and KVM ran the probe's test guest: guests get -cpu host,+${facts.cpuFlag}`,
  };
}

/** The QEMU `-cpu` of a nested guest: the host's CPU model, its virtualisation flag named so it is never left out. */
export const nestedCpuModel = (flag: NestedCpuFlag): string => `host,+${flag}`;

/**
 * Compute Engine machine series that can enable nested virtualization: it hands its guests Intel's VT-x only,
 * so never E2, N2D or another AMD series, nor an Arm one (cloud.google.com/compute/docs/instances/
 * nested-virtualization/overview, "Restrictions").
 */
export const NESTED_VIRTUALIZATION_SERIES = ["n1", "n2", "n4", "c2", "c3", "c4"] as const;

/** Why a Compute Engine machine type cannot enable nested virtualization, or undefined when it can. */
export function gcpNestedVirtualizationProblem(machineType: string): string | undefined {
  const series = machineType.split("-")[0]!;
  return (NESTED_VIRTUALIZATION_SERIES as readonly string[]).includes(series)
    ? undefined
    : `${machineType} cannot enable nested virtualization (Compute Engine offers it on the Intel series ${NESTED_VIRTUALIZATION_SERIES.join(", ")}; not E2, not AMD or Arm series)`;
}
