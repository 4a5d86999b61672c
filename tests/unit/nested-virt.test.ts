// Nested virtualisation for microVM guests: the host's detection over fake /proc, /sys and /dev trees, the
// decision a create gets (every refusal and its words, the spec it adds, the caps), the QEMU argv of a nested
// guest, /healthz's words, the GCP host's machine-series rule and the platform config's caps.
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { validateHostVmArgs, type HostVmArgs } from "../../components/gcp/host-vm.js";
import { microVmSize } from "../../components/tenant/microvm.js";
import { TenantSpec } from "../../components/tenant/spec.js";
import { qemuArgs, type MicroVmSpec } from "../../lib/microvm/launcher.js";
import {
  decideNested,
  gcpNestedVirtualizationProblem,
  readNestedHostFacts,
  type NestedHostFacts,
} from "../../lib/microvm/nested.js";
import type { AcceleratorDecision } from "../../lib/microvm/probe.js";
import { machineFingerprint } from "../../lib/microvm/suspend.js";
import { MicroVmInputs } from "../../provider/resources/microvm.js";
import { CreateProjectBody } from "../../runtime/api/projects/schemas.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { microVmCheck, type MicroVmHost } from "../../runtime/microvm-support.js";
import { TenantRequestError, type TenantDefaults } from "../../runtime/tenants/service.js";
import { TenantsConfig } from "../../stacks/config.js";

const INTEL_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep vmx smx est tm2 ssse3 lm";
const AMD_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep svm extapic cr8_legacy lm";
/** This machine's own: a KVM (kvm_pvm's) with no VT-x or AMD-V in the CPU it shows. */
const PVM_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep hypervisor lahf_lm avx2 avx512f";

/** A host tree as readNestedHostFacts reads one. */
interface FakeHost {
  readonly flags: string;
  readonly kvmDevice?: boolean;
  /** Module name → its `nested` parameter's content (undefined: a module without that parameter). */
  readonly modules?: Readonly<Record<string, string | undefined>>;
}

const roots: string[] = [];
afterAll(async () => {
  for (const root of roots) await fs.rm(root, { recursive: true, force: true });
});

async function fakeHost(host: FakeHost): Promise<string> {
  const root = await fs.mkdtemp(path.join(os.tmpdir(), "nested-host-"));
  roots.push(root);
  await fs.mkdir(path.join(root, "proc"), { recursive: true });
  // Two processors, as /proc/cpuinfo lists each.
  const cpu = (n: number) => `processor\t: ${n}\nvendor_id\t: x\nflags\t\t: ${host.flags}\n`;
  await fs.writeFile(path.join(root, "proc/cpuinfo"), `${cpu(0)}\n${cpu(1)}\n`);
  await fs.mkdir(path.join(root, "sys/module/loop/parameters"), { recursive: true });
  for (const [name, nested] of Object.entries(host.modules ?? {})) {
    await fs.mkdir(path.join(root, "sys/module", name, "parameters"), { recursive: true });
    if (nested !== undefined)
      await fs.writeFile(path.join(root, "sys/module", name, "parameters/nested"), `${nested}\n`);
  }
  if (host.kvmDevice ?? true) {
    await fs.mkdir(path.join(root, "dev"), { recursive: true });
    await fs.writeFile(path.join(root, "dev/kvm"), "");
  }
  return root;
}

const KVM: Pick<AcceleratorDecision, "accelerator" | "reason"> = {
  accelerator: "kvm",
  reason: "kvm ran the test guest in 310 ms",
};
const TCG: Pick<AcceleratorDecision, "accelerator" | "reason"> = {
  accelerator: "tcg",
  reason: "kvm did not run the test guest within 10000 ms (nested virtualisation?); killed it",
};

describe("the host's detection, over fake /proc, /sys and /dev", () => {
  const cases: {
    name: string;
    host: FakeHost;
    probe: typeof KVM;
    facts: NestedHostFacts;
    decision: ReturnType<typeof decideNested>;
  }[] = [
    {
      name: "this machine's shape: /dev/kvm from kvm_pvm, no vmx or svm in the CPU",
      host: { flags: PVM_FLAGS, modules: { kvm: undefined, kvm_pvm: undefined } },
      probe: TCG,
      facts: { kvmDevice: true, kvmModules: ["kvm", "kvm_pvm"] },
      decision: {
        available: false,
        reason:
          "the host's CPU shows neither vmx nor svm in /proc/cpuinfo (KVM modules loaded: kvm, kvm_pvm): no hardware virtualisation to hand on to a guest",
      },
    },
    {
      name: "Intel with no /dev/kvm",
      host: { flags: INTEL_FLAGS, kvmDevice: false },
      probe: TCG,
      facts: { cpuFlag: "vmx", kvmDevice: false, kvmModules: [] },
      decision: { available: false, reason: "no /dev/kvm: KVM is not loaded on this host" },
    },
    {
      name: "Intel with /dev/kvm, kvm_intel not loaded",
      host: { flags: INTEL_FLAGS, modules: { kvm: undefined } },
      probe: KVM,
      facts: { cpuFlag: "vmx", kvmDevice: true, kvmModules: ["kvm"] },
      decision: {
        available: false,
        reason: "kvm_intel is not loaded (KVM modules loaded: kvm), so its guests cannot have vmx",
      },
    },
    {
      name: "Intel, KVM present but nested off",
      host: { flags: INTEL_FLAGS, modules: { kvm: undefined, kvm_intel: "N" } },
      probe: KVM,
      facts: { cpuFlag: "vmx", kvmDevice: true, kvmModules: ["kvm", "kvm_intel"], nestedParameter: "N" },
      decision: {
        available: false,
        reason:
          "kvm_intel's nested parameter is N: the host's KVM hands vmx on to no guest (options kvm_intel nested=1, then reload kvm_intel)",
      },
    },
    {
      name: "AMD, KVM present but nested off (kvm_amd says 0)",
      host: { flags: AMD_FLAGS, modules: { kvm: undefined, kvm_amd: "0" } },
      probe: KVM,
      facts: { cpuFlag: "svm", kvmDevice: true, kvmModules: ["kvm", "kvm_amd"], nestedParameter: "0" },
      decision: {
        available: false,
        reason:
          "kvm_amd's nested parameter is 0: the host's KVM hands svm on to no guest (options kvm_amd nested=1, then reload kvm_amd)",
      },
    },
    {
      name: "Intel with nested on, but the probe fell back to TCG (nested KVM that hangs)",
      host: { flags: INTEL_FLAGS, modules: { kvm: undefined, kvm_intel: "Y" } },
      probe: TCG,
      facts: { cpuFlag: "vmx", kvmDevice: true, kvmModules: ["kvm", "kvm_intel"], nestedParameter: "Y" },
      decision: {
        available: false,
        reason: `the microVM backend runs its guests under tcg here (${TCG.reason}); only a guest of the host's KVM can have KVM of its own`,
      },
    },
    {
      name: "Intel with nested on and KVM running guests: vmx",
      host: { flags: INTEL_FLAGS, modules: { kvm: undefined, kvm_intel: "Y" } },
      probe: KVM,
      facts: { cpuFlag: "vmx", kvmDevice: true, kvmModules: ["kvm", "kvm_intel"], nestedParameter: "Y" },
      decision: {
        available: true,
        cpuFlag: "vmx",
        reason: "kvm_intel nested=Y and KVM ran the probe's test guest: guests get -cpu host,+vmx",
      },
    },
    {
      name: "AMD with nested on (kvm_amd says 1) and KVM running guests: svm",
      host: { flags: AMD_FLAGS, modules: { kvm: undefined, kvm_amd: "1", irqbypass: undefined } },
      probe: KVM,
      facts: { cpuFlag: "svm", kvmDevice: true, kvmModules: ["kvm", "kvm_amd"], nestedParameter: "1" },
      decision: {
        available: true,
        cpuFlag: "svm",
        reason: "kvm_amd nested=1 and KVM ran the probe's test guest: guests get -cpu host,+svm",
      },
    },
  ];
  for (const c of cases)
    it(c.name, async () => {
      const facts = await readNestedHostFacts(await fakeHost(c.host));
      expect(facts).toEqual(c.facts);
      expect(decideNested(facts, c.probe)).toEqual(c.decision);
    });

  it("a tree with nothing in it is a host without any of it, never an error", async () => {
    const empty = await fs.mkdtemp(path.join(os.tmpdir(), "nested-empty-"));
    roots.push(empty);
    expect(await readNestedHostFacts(empty)).toEqual({ kvmDevice: false, kvmModules: [] });
  });
});

/** A probed microVM host, with the nested decision given. */
const probedHost = (nested?: MicroVmHost["nested"]): MicroVmHost => ({
  kernel: "/cache/microvm/kernel/vmlinuz",
  initrd: "/cache/microvm/kernel/initrd.img",
  accelerator: nested?.available ? "kvm" : "tcg",
  stateRoot: "/var/lib/agent-sandbox/microvm/vms",
  platformKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
  platformPrivateKey: "",
  decision: { accelerator: "kvm", reason: "r", bootId: "b", probedAt: "t", probeMs: 0 },
  ...(nested === undefined ? {} : { nested, nestedInitrd: "/cache/microvm/kernel/initrd-nested.img" }),
});
const OFFERED = { available: true, cpuFlag: "vmx", reason: "kvm_intel nested=Y" } as const;
const REFUSED = { available: false, reason: "kvm_intel's nested parameter is N" } as const;

const backends = platformBackends({
  docker: () => {
    throw new Error("no engine here");
  },
});
const defaults = (extra: Partial<TenantDefaults> = {}) => ({ ...extra }) as TenantDefaults;
const microvmOn = (host: MicroVmHost, extra: Partial<TenantDefaults> = {}) =>
  defaults({ microvm: () => ({ available: true, host }), ...extra });

/** The refusal `admit` throws: its status and message. */
function refusal(call: () => unknown): { status: number; message: string } {
  try {
    call();
  } catch (error) {
    if (error instanceof TenantRequestError) return { status: error.status, message: error.message };
    throw error;
  }
  throw new Error("admitted");
}

describe("the decision at a project's create", () => {
  it("refuses it for a backend that is no microVM (400), the platform's default container included", () => {
    for (const kind of ["container", "kubernetes", undefined])
      expect(
        refusal(() => backends.admit(kind, microvmOn(probedHost(OFFERED)), { nestedVirtualization: true })),
      ).toEqual({
        status: 400,
        message: `nested_virtualization is a microVM's: a ${kind ?? "container"} project's sandbox has no kernel of its own to run KVM in`,
      });
  });

  it("refuses it on a host that does not offer it (409), naming the host's reason", () => {
    expect(
      refusal(() =>
        backends.admit("microvm", microvmOn(probedHost(REFUSED)), { nestedVirtualization: true }),
      ),
    ).toEqual({
      status: 409,
      message: "nested virtualisation is not available on this host: kvm_intel's nested parameter is N",
    });
    // A runtime whose probe did not decide it (a host object of before) offers none.
    expect(
      refusal(() => backends.admit("microvm", microvmOn(probedHost()), { nestedVirtualization: true })),
    ).toEqual({
      status: 409,
      message: "nested virtualisation is not available on this host: this runtime's probe did not decide it",
    });
    // No microVMs at all: the backend's own refusal comes first.
    expect(
      refusal(() =>
        backends.admit("microvm", defaults({ microvm: () => ({ available: false, reason: "no QEMU" }) }), {
          nestedVirtualization: true,
        }),
      ),
    ).toEqual({ status: 409, message: "the microvm backend is not available on this host: no QEMU" });
  });

  it("where offered: the nested initramfs, the CPU flag and the caps (4 GiB, 2 vCPUs unless configured)", () => {
    const fields = backends.admit("microvm", microvmOn(probedHost(OFFERED)), { nestedVirtualization: true });
    expect(fields.microvm).toMatchObject({
      initrd: "/cache/microvm/kernel/initrd-nested.img",
      nested: { cpuFlag: "vmx", maxMemoryMiB: 4096, maxVcpus: 2 },
    });
    const configured = backends.admit(
      "microvm",
      microvmOn(probedHost(OFFERED), { nestedCaps: { memoryMiB: 8192, vcpus: 4 } }),
      { nestedVirtualization: true },
    );
    expect(configured.microvm?.nested).toEqual({ cpuFlag: "vmx", maxMemoryMiB: 8192, maxVcpus: 4 });
  });

  it("not asked: the plain initramfs and no nested block, on any host", () => {
    for (const nested of [OFFERED, REFUSED, undefined]) {
      const fields = backends.admit("microvm", microvmOn(probedHost(nested)));
      expect(fields.microvm?.initrd).toBe("/cache/microvm/kernel/initrd.img");
      expect(fields.microvm).not.toHaveProperty("nested");
    }
    expect(
      backends.admit("container", microvmOn(probedHost(OFFERED)), { nestedVirtualization: false }),
    ).toEqual({});
  });

  it("the create's body takes a boolean", () => {
    expect(CreateProjectBody.parse({ name: "n", nested_virtualization: true }).nested_virtualization).toBe(
      true,
    );
    expect(CreateProjectBody.safeParse({ name: "n", nested_virtualization: "yes" }).success).toBe(false);
  });

  it("the spec and the VM resource take it under KVM only", () => {
    const base = {
      projectId: "p1",
      ownerId: "owner",
      mode: "local",
      image: "i",
      subnet: "10.1.2.0/24",
      sshHostPort: 2200,
      host: { squidConfigFile: "/s", squidFragmentsDir: "/d", backupRoot: "/b" },
      backend: "microvm",
    };
    const microvm = {
      kernel: "/k",
      initrd: "/i",
      stateRoot: "/s",
      platformKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
      nested: { cpuFlag: "vmx", maxMemoryMiB: 4096, maxVcpus: 2 },
    };
    expect(TenantSpec.safeParse({ ...base, microvm: { ...microvm, accelerator: "kvm" } }).success).toBe(true);
    expect(
      TenantSpec.safeParse({ ...base, microvm: { ...microvm, accelerator: "tcg" } }).error?.issues,
    ).toEqual([
      expect.objectContaining({ path: ["microvm", "nested"], message: "needs accelerator kvm, not tcg" }),
    ]);
    const inputs = {
      stateDir: "/var/lib/agent-sandbox/microvm/vms/p1",
      image: "i",
      kernel: "/k",
      initrd: "/i",
      accelerator: "kvm",
      nested: "svm",
      vcpus: 2,
      memoryMiB: 4096,
      homeSizeMiB: 1024,
      bridge: "br-p1",
      address: "10.1.2.2/24",
      gateway: "10.1.2.1",
      authorizedKeys: ["ssh-ed25519 AAAA a"],
    };
    expect(MicroVmInputs.parse(inputs).nested).toBe("svm");
    expect(MicroVmInputs.safeParse({ ...inputs, accelerator: "tcg" }).error?.issues).toEqual([
      expect.objectContaining({ path: ["nested"] }),
    ]);
    expect(MicroVmInputs.safeParse({ ...inputs, nested: "vmx,+pdpe1gb" }).success).toBe(false);
  });
});

/** A VM spec as the provider hands it to the launcher. */
const vmSpec = (extra: Partial<MicroVmSpec> = {}): MicroVmSpec => ({
  stateDir: "/var/lib/agent-sandbox/microvm/vms/p1",
  kernel: "/k/vmlinuz",
  initrd: "/k/initrd.img",
  rootfs: "/r/root.ext4",
  accelerator: "kvm",
  vcpus: 2,
  memoryMiB: 2048,
  homeSizeMiB: 1024,
  bridge: "br-p1",
  address: "10.100.3.2/24",
  gateway: "10.100.3.1",
  authorizedKeys: ["ssh-ed25519 AAAAagent agent@p1"],
  ...extra,
});
/** The value after `flag` in an argv (the first one). */
const after = (argv: readonly string[], flag: string) => argv[argv.indexOf(flag) + 1];

describe("a nested guest's QEMU", () => {
  it("gets the host's CPU with its vendor's flag; other guests get QEMU's default CPU", () => {
    for (const [nested, cpu] of [
      ["vmx", "host,+vmx"],
      ["svm", "host,+svm"],
    ] as const) {
      const argv = qemuArgs(vmSpec({ nested, initrd: "/k/initrd-nested.img" }), "mvt0", []);
      expect(after(argv, "-accel")).toBe("kvm");
      expect(after(argv, "-cpu")).toBe(cpu);
      expect(after(argv, "-initrd")).toBe("/k/initrd-nested.img");
    }
    expect(qemuArgs(vmSpec(), "mvt0", [])).not.toContain("-cpu");
    expect(qemuArgs(vmSpec({ accelerator: "tcg" }), "mvt0", [])).not.toContain("-cpu");
  });

  it("its size is the project's limits held to the caps", () => {
    const caps = { maxMemoryMiB: 4096, maxVcpus: 2 };
    const table: [
      limits: { cpus: number; memoryMiB: number },
      nested: typeof caps | undefined,
      size: object,
    ][] = [
      [{ cpus: 4, memoryMiB: 8192 }, caps, { vcpus: 2, memoryMiB: 4096 }],
      [{ cpus: 1.5, memoryMiB: 6000 }, caps, { vcpus: 2, memoryMiB: 4096 }],
      [{ cpus: 0.5, memoryMiB: 1024 }, caps, { vcpus: 1, memoryMiB: 1024 }],
      [
        { cpus: 8, memoryMiB: 16384 },
        { maxMemoryMiB: 12288, maxVcpus: 6 },
        { vcpus: 6, memoryMiB: 12288 },
      ],
      // Without nested virtualisation, the limits alone (as before).
      [{ cpus: 4, memoryMiB: 8192 }, undefined, { vcpus: 4, memoryMiB: 8192 }],
    ];
    for (const [limits, nested, size] of table) expect(microVmSize(limits, nested)).toEqual(size);
  });

  it("a memory image fits only the CPU it was saved with; images of VMs without it fit as before", () => {
    // Recorded from the fingerprint before nested virtualisation existed: a suspended VM survives the upgrade.
    expect(machineFingerprint(vmSpec())).toBe(
      "cf1b295d8185a383ed37b88dbb2470d47e85b3c88b5420ec55f5f15b295e04fd",
    );
    const vmx = machineFingerprint(vmSpec({ nested: "vmx" }));
    expect(vmx).not.toBe(machineFingerprint(vmSpec()));
    expect(vmx).not.toBe(machineFingerprint(vmSpec({ nested: "svm" })));
  });
});

describe("/healthz's microvm line", () => {
  it("says whether nested virtualisation is offered and why, ready either way", () => {
    expect(microVmCheck({ available: true, host: probedHost(OFFERED) }, true)).toEqual({
      name: "microvm",
      ready: true,
      detail: "accelerator kvm (r); qemu; nested virtualisation offered (vmx: kvm_intel nested=Y)",
    });
    expect(microVmCheck({ available: true, host: probedHost(REFUSED) }, true)).toEqual({
      name: "microvm",
      ready: true,
      detail:
        "accelerator kvm (r); qemu; nested virtualisation not offered (kvm_intel's nested parameter is N)",
    });
    expect(microVmCheck({ available: true, host: probedHost() }, true).detail).toBe(
      "accelerator kvm (r); qemu",
    );
  });
});

describe("the GCP host VM's nested virtualization", () => {
  const args = (machineType: string, nestedVirtualization: boolean): HostVmArgs => ({
    project: "p",
    region: "europe-west1",
    zone: "europe-west1-b",
    machineType,
    image: "debian-cloud/debian-13",
    bootDiskSizeGb: 30,
    dataDiskSizeGb: 200,
    subnetworkId: "s",
    serviceAccountEmail: "a@p.iam.gserviceaccount.com",
    address: "203.0.113.7",
    startupScript: "#!/bin/sh",
    labels: {},
    nestedVirtualization,
  });
  // Whether Compute Engine can give the series' VMs VT-x: Intel series only.
  const table: [machineType: string, canNest: boolean][] = [
    ["n2-standard-8", true],
    ["n1-standard-4", true],
    ["c3-standard-4", true],
    ["n4-standard-8", true],
    ["e2-standard-4", false],
    ["n2d-standard-8", false],
    ["c2d-standard-8", false],
    ["t2a-standard-4", false],
    ["t2d-standard-4", false],
  ];
  for (const [machineType, canNest] of table)
    it(`${machineType}: ${canNest ? "accepted" : "refused"} with it, accepted without`, () => {
      expect(validateHostVmArgs(args(machineType, true))).toEqual(
        canNest
          ? []
          : [
              `nestedVirtualization: machineType ${machineType} cannot enable nested virtualization (Compute Engine offers it on the Intel series n1, n2, n4, c2, c3, c4; not E2, not AMD or Arm series)`,
            ],
      );
      expect(gcpNestedVirtualizationProblem(machineType) === undefined).toBe(canNest);
      expect(validateHostVmArgs(args(machineType, false))).toEqual([]);
    });
});

describe("the platform's caps (tenants.nestedVirtualization)", () => {
  it("4 GiB and 2 vCPUs unless set; nonsense refused", () => {
    expect(TenantsConfig.parse({}).nestedVirtualization).toEqual({ memoryMiB: 4096, vcpus: 2 });
    expect(TenantsConfig.parse({ nestedVirtualization: { vcpus: 4 } }).nestedVirtualization).toEqual({
      memoryMiB: 4096,
      vcpus: 4,
    });
    for (const bad of [{ vcpus: 0 }, { memoryMiB: 100 }, { memoryMiB: 4096.5 }, { cores: 2 }])
      expect(TenantsConfig.safeParse({ nestedVirtualization: bad }).success, JSON.stringify(bad)).toBe(false);
  });
});
