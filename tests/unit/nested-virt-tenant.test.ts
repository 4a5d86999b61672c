// A nested project's tenant program under Pulumi mocks, to the QEMU it runs: the spec the create recorded →
// the MicroVM resource's inputs (the caps applied, the CPU flag) → the provider's validated inputs → the
// launcher's argv.
import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";

interface Registered {
  type: string;
  inputs: Record<string, unknown>;
}
const registered: Registered[] = [];
/** How the engine marks a secret value on the wire (pulumi/sdk runtime rpc.ts). */
const SECRET_SIG = "4dabf18193072939515e22adb298388d";

let Tenant: typeof import("../../components/tenant/tenant.js").Tenant;
let TenantSpec: typeof import("../../components/tenant/spec.js").TenantSpec;
let MicroVmInputs: typeof import("../../provider/resources/microvm.js").MicroVmInputs;
let launcherSpec: typeof import("../../provider/resources/microvm.js").launcherSpec;
let qemuArgs: typeof import("../../lib/microvm/launcher.js").qemuArgs;

beforeAll(async () => {
  await pulumi.runtime.setMocks(
    {
      newResource(args) {
        registered.push({ type: args.type, inputs: args.inputs });
        const computed =
          args.type === "sandbox:crypto:SshKeyPair"
            ? { publicKey: "ssh-ed25519 AAAAmock agent@test", privateKey: "k", fingerprint: "f" }
            : {};
        return { id: `${args.name}-id`, state: { ...args.inputs, ...computed } };
      },
      call(args) {
        throw new Error(`unexpected call to ${args.token}`);
      },
    },
    "agent-sandbox-tenant",
    "tenant-mock",
    false,
  );
  ({ Tenant } = await import("../../components/tenant/tenant.js"));
  ({ TenantSpec } = await import("../../components/tenant/spec.js"));
  ({ MicroVmInputs, launcherSpec } = await import("../../provider/resources/microvm.js"));
  ({ qemuArgs } = await import("../../lib/microvm/launcher.js"));
});

const spec = {
  projectId: "p1",
  ownerId: "user-7",
  mode: "local",
  image: "agent-sandbox/sandbox:abc",
  subnet: "10.100.3.0/24",
  sshHostPort: 10003,
  limits: { memoryMiB: 8192, cpus: 4, pids: 512 },
  host: {
    squidPort: 3128,
    squidConfigFile: "/etc/agent-sandbox/squid/squid.conf",
    squidFragmentsDir: "/etc/agent-sandbox/squid/tenants",
    backupRoot: "/var/lib/agent-sandbox/backups",
    secretsRoot: "/var/lib/agent-sandbox/tenant-secrets",
  },
  backend: "microvm",
  microvm: {
    kernel: "/cache/microvm/kernel/vmlinuz",
    initrd: "/cache/microvm/kernel/initrd.img",
    accelerator: "kvm",
    stateRoot: "/var/lib/agent-sandbox/microvm/vms",
    platformKey: "ssh-ed25519 AAAAplatform agent-sandbox-platform",
  },
};

/** The MicroVM resource's inputs of a tenant of `microvm`, its secret values unwrapped. */
async function vmInputs(microvm: Record<string, unknown>): Promise<Record<string, unknown>> {
  registered.length = 0;
  const tenant = new Tenant("tenant", { ...TenantSpec.parse({ ...spec, microvm }), secrets: [] });
  await new Promise<void>((resolve) => pulumi.all([tenant.urn, tenant.containerName]).apply(() => resolve()));
  await new Promise((resolve) => setTimeout(resolve, 50));
  const vms = registered.filter((r) => r.type === "sandbox:vm:MicroVM");
  expect(vms).toHaveLength(1);
  return Object.fromEntries(
    Object.entries(vms[0]!.inputs).map(([key, value]) => [
      key,
      (value as Record<string, unknown> | undefined)?.[SECRET_SIG]
        ? (value as { value: unknown }).value
        : value,
    ]),
  );
}

/** The QEMU argv the provider's launcher runs for those inputs. */
const argvOf = (inputs: Record<string, unknown>) =>
  qemuArgs(launcherSpec(MicroVmInputs.parse(inputs), "/cache/microvm/rootfs/abc.ext4"), "mvt0", []);
const after = (argv: readonly string[], flag: string) => argv[argv.indexOf(flag) + 1];

describe("a nested project's microVM, from its spec to its QEMU", () => {
  it("the host's CPU with vmx, the nested initramfs, held to 4 GiB and 2 vCPUs whatever its limits", async () => {
    const inputs = await vmInputs({
      ...spec.microvm,
      initrd: "/cache/microvm/kernel/initrd-nested.img",
      nested: { cpuFlag: "vmx", maxMemoryMiB: 4096, maxVcpus: 2 },
    });
    expect(inputs).toMatchObject({ nested: "vmx", memoryMiB: 4096, vcpus: 2, accelerator: "kvm" });
    const argv = argvOf(inputs);
    expect(after(argv, "-cpu")).toBe("host,+vmx");
    expect(after(argv, "-m")).toBe("4096");
    expect(after(argv, "-smp")).toBe("2");
    expect(after(argv, "-initrd")).toBe("/cache/microvm/kernel/initrd-nested.img");
  });

  it("svm on an AMD host, with the caps the platform configured", async () => {
    const argv = argvOf(
      await vmInputs({ ...spec.microvm, nested: { cpuFlag: "svm", maxMemoryMiB: 6144, maxVcpus: 3 } }),
    );
    expect([after(argv, "-cpu"), after(argv, "-m"), after(argv, "-smp")]).toEqual(["host,+svm", "6144", "3"]);
  });

  it("a project without it: its limits, QEMU's default CPU, the plain initramfs", async () => {
    const inputs = await vmInputs(spec.microvm);
    expect(inputs).not.toHaveProperty("nested");
    const argv = argvOf(inputs);
    expect(argv).not.toContain("-cpu");
    expect([after(argv, "-m"), after(argv, "-smp"), after(argv, "-initrd")]).toEqual([
      "8192",
      "4",
      "/cache/microvm/kernel/initrd.img",
    ]);
  });
});
