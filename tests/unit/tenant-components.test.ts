// The tenant components under Pulumi mocks: every resource they declare, with the properties that make a
// sandbox safe (limits, dropped capabilities, labels, egress rules, IAM condition text).
import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";

interface Registered {
  type: string;
  name: string;
  inputs: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
}
const registered: Registered[] = [];
/** How the engine marks a secret value on the wire (pulumi/sdk runtime rpc.ts). */
const SECRET_SIG = "4dabf18193072939515e22adb298388d";
const SECRET_VALUE_SIG = "1b47061264138c4ac30d75fd1eb44270";

/** Outputs a real provider would compute, so components can use them. */
function computedOutputs(type: string, inputs: Record<string, unknown>): Record<string, unknown> {
  switch (type) {
    case "sandbox:crypto:SshKeyPair":
      return {
        publicKey: "ssh-ed25519 AAAAmock agent@test",
        privateKey: "-----BEGIN OPENSSH PRIVATE KEY-----mock",
        fingerprint: "SHA256:mock",
      };
    case "sandbox:docker:Volume":
      return { mountpoint: `/var/lib/docker/volumes/${inputs.name}/_data` };
    case "sandbox:host:Filesystem":
      return { dataPath: `${inputs.mountpoint}/data`, uuid: "mock-uuid", mounted: true };
    case "gcp:serviceaccount/account:Account":
      return {
        email: `${inputs.accountId}@gcp-project.iam.gserviceaccount.com`,
        name: `projects/p/serviceAccounts/${inputs.accountId}`,
      };
    default:
      return {};
  }
}

let Tenant: typeof import("../../components/tenant/tenant.js").Tenant;
let TenantSpec: typeof import("../../components/tenant/spec.js").TenantSpec;
let DEFAULT_ALLOWLIST: typeof import("../../components/tenant/spec.js").DEFAULT_ALLOWLIST;
let backupScheduleEnv: typeof import("../../components/tenant/spec.js").backupScheduleEnv;
let bucketPrefixConditions: typeof import("../../components/tenant/identity.js").bucketPrefixConditions;

beforeAll(async () => {
  await pulumi.runtime.setMocks(
    {
      newResource(args) {
        registered.push({ type: args.type, name: args.name, inputs: args.inputs });
        return {
          id: `${args.name}-id`,
          state: { ...args.inputs, ...computedOutputs(args.type, args.inputs) },
        };
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
  ({ TenantSpec, DEFAULT_ALLOWLIST, backupScheduleEnv } = await import("../../components/tenant/spec.js"));
  ({ bucketPrefixConditions } = await import("../../components/tenant/identity.js"));
});

const host = {
  squidPort: 3128,
  squidConfigFile: "/etc/agent-sandbox/squid/squid.conf",
  squidFragmentsDir: "/etc/agent-sandbox/squid/tenants",
  backupRoot: "/var/lib/agent-sandbox/backups",
  secretsRoot: "/var/lib/agent-sandbox/tenant-secrets",
};

/** Declares a tenant and resolves once every child is registered. */
async function declare(
  spec: Record<string, unknown>,
  secrets: { name: string; delivery: "env" | "file" | "gateway"; value: string }[] = [],
): Promise<Registered[]> {
  registered.length = 0;
  const tenant = new Tenant("tenant", { ...TenantSpec.parse(spec), secrets });
  await new Promise<void>((resolve) =>
    pulumi
      .all([tenant.urn, tenant.containerName, tenant.sshPublicKey, tenant.backupRemote])
      .apply(() => resolve()),
  );
  // Children registered inside apply() callbacks arrive a tick later.
  await new Promise((resolve) => setTimeout(resolve, 50));
  return [...registered];
}

const byType = (resources: Registered[], type: string) => resources.filter((r) => r.type === type);
const one = (resources: Registered[], type: string) => {
  const found = byType(resources, type);
  expect(found, type).toHaveLength(1);
  return found[0]!;
};

/** A local-mode tenant as the runtime records one. */
const localSpec = {
  projectId: "p1",
  ownerId: "user-7",
  mode: "local",
  image: "agent-sandbox/sandbox:abc",
  subnet: "10.100.3.0/24",
  sshHostPort: 10003,
  host,
};

describe("Tenant (local mode)", () => {
  let resources: Registered[];
  beforeAll(async () => {
    resources = await declare(localSpec);
  });

  it("declares the five parts and nothing of GCP", () => {
    expect(resources.map((r) => r.type).sort()).toEqual(
      [
        "sandbox:crypto:SshKeyPair",
        "sandbox:docker:Container",
        "sandbox:docker:Network",
        "sandbox:docker:Volume",
        "sandbox:host:Directory",
        "sandbox:host:File",
        "sandbox:host:SquidTenant",
        "sandbox:host:TenantFirewall",
        "sandbox:tenant:Egress",
        "sandbox:tenant:Identity",
        "sandbox:tenant:Network",
        "sandbox:tenant:Sandbox",
        "sandbox:tenant:Secrets",
        "sandbox:tenant:Storage",
        "sandbox:tenant:Tenant",
      ].sort(),
    );
  });

  it("child names derive from the component name, so tenants never collide", () => {
    for (const r of resources) expect(r.name.startsWith("tenant")).toBe(true);
  });

  it("the container has the seed's limits, every capability dropped but the entrypoint's and sshd's, no DNS, labels", () => {
    const container = one(resources, "sandbox:docker:Container").inputs;
    expect(container).toMatchObject({
      name: "sbx-p1",
      image: "agent-sandbox/sandbox:abc",
      memoryBytes: 1024 * 1024 * 1024,
      nanoCpus: 1_000_000_000,
      pidsLimit: 512,
      capAdd: ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "SYS_CHROOT", "KILL", "AUDIT_WRITE"],
      dns: ["10.100.3.1"], // the gateway, which the tenant's firewall drops: no resolver anywhere
      network: "sbx-net-p1",
      ipv4Address: "10.100.3.2",
      running: true,
      ports: [{ containerPort: 2222, hostPort: 10003 }],
    });
    expect(container.capAdd).not.toContain("SYS_ADMIN");
    expect(container.labels).toEqual({
      "dev.agent-sandbox.tenant": "p1",
      "dev.agent-sandbox.owner": "user-7",
      "dev.agent-sandbox.stack": "tenant-p1",
      "dev.agent-sandbox.managed-by": "agent-sandbox",
    });
    expect(container.mounts).toEqual([
      { type: "volume", source: "sbx-home-p1", target: "/home/agent" },
      { type: "tmpfs", target: "/run" },
      // The agent's other writable paths: in memory, of fixed sizes (a limits change stays in place).
      { type: "tmpfs", target: "/tmp", tmpfs: { sizeBytes: 512 << 20, mode: 0o1777 } },
      { type: "tmpfs", target: "/var/tmp", tmpfs: { sizeBytes: 256 << 20, mode: 0o1777 } },
      { type: "bind", source: "/var/lib/agent-sandbox/backups/p1", target: "/mnt/backup" },
      // The project's secrets (an agent.env at least), read-only.
      {
        type: "bind",
        source: "/var/lib/agent-sandbox/tenant-secrets/p1",
        target: "/run/secrets",
        readOnly: true,
      },
    ]);
    expect(container.mounts.some((m: { source?: string }) => m.source?.endsWith("docker.sock"))).toBe(false);
  });

  it("the container's environment is the seed's: project id, proxy through its own gateway, NO_PROXY", () => {
    const env = one(resources, "sandbox:docker:Container").inputs.env;
    expect(env).toMatchObject({
      PROJECT_ID: "p1",
      HTTP_PROXY: "http://10.100.3.1:3128",
      HTTPS_PROXY: "http://10.100.3.1:3128",
      https_proxy: "http://10.100.3.1:3128",
      NO_PROXY: "localhost,127.0.0.1",
      SSH_PUBLIC_KEY: "ssh-ed25519 AAAAmock agent@test",
      BACKUP_REMOTE: "/mnt/backup/workspace",
      BACKUP_INTERVAL_SECONDS: "300",
    });
    expect(env).not.toHaveProperty("GCS_SA_KEY");
    // A spec without the delay after a change (a tenant made before it existed) keeps its environment.
    expect(env).not.toHaveProperty("BACKUP_AFTER_CHANGE_SECONDS");
  });

  it("the backup schedule's environment: the delay after a change only when the spec has one", () => {
    expect(backupScheduleEnv(300)).toEqual({ BACKUP_INTERVAL_SECONDS: "300" });
    expect(backupScheduleEnv(300, 60)).toEqual({
      BACKUP_INTERVAL_SECONDS: "300",
      BACKUP_AFTER_CHANGE_SECONDS: "60",
    });
    expect(backupScheduleEnv(300, 0)).toMatchObject({ BACKUP_AFTER_CHANGE_SECONDS: "0" });
  });

  it("the bridge is the tenant's own /24 with a ≤15-character interface name", () => {
    const network = one(resources, "sandbox:docker:Network").inputs;
    expect(network).toMatchObject({ name: "sbx-net-p1", subnet: "10.100.3.0/24", gateway: "10.100.3.1" });
    expect(network.bridgeName).toMatch(/^sbx-[0-9a-f]{11}$/);
  });

  it("egress: firewall keyed by bridge and subnet, the default allowlist", () => {
    const network = one(resources, "sandbox:docker:Network").inputs;
    expect(one(resources, "sandbox:host:TenantFirewall").inputs).toEqual({
      tenantId: "p1",
      bridge: network.bridgeName,
      subnet: "10.100.3.0/24",
      gateway: "10.100.3.1",
      proxyPort: 3128,
      sshPort: 2222,
    });
    expect(one(resources, "sandbox:host:SquidTenant").inputs).toMatchObject({
      tenantId: "p1",
      subnet: "10.100.3.0/24",
      domains: [...DEFAULT_ALLOWLIST],
      configFile: host.squidConfigFile,
      fragmentsDir: host.squidFragmentsDir,
    });
  });

  it("storage and the backup location are keyed by the immutable project id", () => {
    expect(one(resources, "sandbox:docker:Volume").inputs.name).toBe("sbx-home-p1");
    expect(one(resources, "sandbox:host:Directory").inputs).toEqual({
      path: "/var/lib/agent-sandbox/backups/p1",
      uid: 1000,
      gid: 1000,
      mode: "0700",
      deleteContents: true,
    });
  });
});

describe("Tenant (local mode, with its own filesystems)", () => {
  let resources: Registered[];
  beforeAll(async () => {
    resources = await declare({
      ...localSpec,
      host: { ...host, disksRoot: "/var/lib/agent-sandbox/disks" },
      homeBytes: 256 * 2 ** 20,
      backupBytes: 320 * 2 ** 20,
      protectedPaths: [".git/hooks"],
    });
  });

  it("the home and the backup location are two images of their own, the volume binding the home's data", () => {
    const disks = byType(resources, "sandbox:host:Filesystem").map((r) => r.inputs);
    expect(disks).toEqual([
      {
        imagePath: "/var/lib/agent-sandbox/disks/p1/backup.img",
        mountpoint: "/var/lib/agent-sandbox/disks/p1/backup",
        sizeBytes: 320 * 2 ** 20,
        uid: 1000,
        gid: 1000,
        mode: "0700",
      },
      {
        imagePath: "/var/lib/agent-sandbox/disks/p1/home.img",
        mountpoint: "/var/lib/agent-sandbox/disks/p1/home",
        sizeBytes: 256 * 2 ** 20,
        uid: 1000,
        gid: 1000,
        mode: "0755",
      },
    ]);
    expect(byType(resources, "sandbox:host:Directory").map((r) => r.inputs.path)).not.toContain(
      "/var/lib/agent-sandbox/backups/p1",
    );
    expect(one(resources, "sandbox:docker:Volume").inputs).toMatchObject({
      name: "sbx-home-p1",
      driverOpts: { type: "none", o: "bind", device: "/var/lib/agent-sandbox/disks/p1/home/data" },
    });
    const mounts = one(resources, "sandbox:docker:Container").inputs.mounts as Record<string, unknown>[];
    expect(mounts).toContainEqual({
      type: "bind",
      source: "/var/lib/agent-sandbox/disks/p1/backup/data",
      target: "/mnt/backup",
    });
    // A protected path is bound from where the home's files are: the filesystem, not the volume's own directory.
    expect(mounts).toContainEqual({
      type: "bind",
      source: "/var/lib/agent-sandbox/disks/p1/home/data/.git/hooks",
      target: "/home/agent/.git/hooks",
      readOnly: true,
    });
  });

  it("a spec without the sizes (a tenant made before them) keeps its plain volume and directory", async () => {
    const before = await declare({
      ...localSpec,
      host: { ...host, disksRoot: "/var/lib/agent-sandbox/disks" },
    });
    expect(byType(before, "sandbox:host:Filesystem")).toEqual([]);
    expect(one(before, "sandbox:docker:Volume").inputs).not.toHaveProperty("driverOpts");
    expect(TenantSpec.safeParse({ ...localSpec, homeBytes: 256 * 2 ** 20 }).error?.issues[0]).toMatchObject({
      path: ["host", "disksRoot"],
      message: "is required with homeBytes or backupBytes",
    });
    expect(
      TenantSpec.safeParse({ ...localSpec, host: { ...host, disksRoot: "/d" }, homeBytes: 2 ** 20 }).error
        ?.issues[0],
    ).toMatchObject({ path: ["homeBytes"], message: "must be at least 67108864 (64 MiB)" });
  });
});

describe("Tenant (gcp mode)", () => {
  let resources: Registered[];
  beforeAll(async () => {
    resources = await declare({
      projectId: "p1",
      ownerId: "user-7",
      mode: "gcp",
      image: "europe-docker.pkg.dev/x/sandboxes/sandbox:abc",
      subnet: "10.100.3.0/24",
      sshHostPort: 10003,
      host,
      gcp: { project: "gcp-project", bucket: "sandbox-bucket" },
      limits: { memoryMiB: 2048, cpus: 2, pids: 1024 },
      allowlist: [".example.com"],
    });
  });

  it("a service account without a key, the Project Service account its only token creator, and three prefix-conditioned bucket bindings", () => {
    const account = one(resources, "gcp:serviceaccount/account:Account").inputs;
    expect(account.accountId).toMatch(/^sbx-[0-9a-f]{20}$/);
    expect(account.project).toBe("gcp-project");
    // Impersonation is the only way to its credentials: no key resource of any kind.
    expect(resources.filter((r) => /key:Key$|hmacKey|HmacKey/.test(r.type))).toEqual([]);
    const creators = byType(resources, "gcp:serviceaccount/iAMMember:IAMMember").map((r) => r.inputs);
    expect(creators).toEqual([
      {
        serviceAccountId: `projects/p/serviceAccounts/${account.accountId}`,
        role: "roles/iam.serviceAccountTokenCreator",
        member: "serviceAccount:project-service-sa@gcp-project.iam.gserviceaccount.com",
      },
    ]);
    const bindings = byType(resources, "gcp:storage/bucketIAMMember:BucketIAMMember").map((r) => r.inputs);
    expect(bindings).toHaveLength(3);
    for (const binding of bindings) {
      expect(binding.bucket).toBe("sandbox-bucket");
      expect(binding.member).toBe(`serviceAccount:${account.accountId}@gcp-project.iam.gserviceaccount.com`);
      expect(binding.role).not.toMatch(/roles\/(owner|editor|storage\.admin)$/);
    }
    expect(bindings.map((b) => b.condition.expression)).toEqual(
      bucketPrefixConditions("sandbox-bucket", "p1").map((c) => c.expression),
    );
  });

  it("the container gets a token file's path (written by the runtime), never a key, never a credential in its environment", () => {
    const container = one(resources, "sandbox:docker:Container").inputs;
    const env = container.env[SECRET_SIG] === SECRET_VALUE_SIG ? container.env.value : container.env;
    expect(env).toMatchObject({
      GCS_TOKEN_FILE: "/run/secrets/gcs-token.json",
      BACKUP_REMOTE: ":gcs:sandbox-bucket/projects/p1/workspace",
    });
    expect(Object.keys(env).filter((k) => /GCS_SA|_KEY_FILE|CREDENTIALS/.test(k))).toEqual([]);
    // The stack writes no credential file: the directory only, root-only, emptied with the tenant.
    expect(byType(resources, "sandbox:host:File").filter((f) => /gcs-/.test(String(f.inputs.path)))).toEqual(
      [],
    );
    expect(one(resources, "sandbox:host:Directory").inputs).toMatchObject({
      path: "/var/lib/agent-sandbox/tenant-secrets/p1",
      uid: 0,
      gid: 0,
      mode: "0700",
      deleteContents: true,
    });
    expect(container).toMatchObject({
      memoryBytes: 2048 * 1024 * 1024,
      nanoCpus: 2_000_000_000,
      pidsLimit: 1024,
    });
    expect(container.mounts).toEqual([
      { type: "volume", source: "sbx-home-p1", target: "/home/agent" },
      { type: "tmpfs", target: "/run" },
      { type: "tmpfs", target: "/tmp", tmpfs: { sizeBytes: 512 << 20, mode: 0o1777 } },
      { type: "tmpfs", target: "/var/tmp", tmpfs: { sizeBytes: 256 << 20, mode: 0o1777 } },
      {
        type: "bind",
        source: "/var/lib/agent-sandbox/tenant-secrets/p1",
        target: "/run/secrets",
        readOnly: true,
      },
    ]);
    expect(one(resources, "sandbox:host:SquidTenant").inputs.domains).toEqual([".example.com"]);
  });
});

describe("Tenant with a public key made by the API", () => {
  it("uses that key and makes no keypair of its own (no private key in the stack's state)", async () => {
    const resources = await declare({
      projectId: "p2",
      ownerId: "user-7",
      mode: "local",
      image: "i",
      subnet: "10.100.4.0/24",
      sshHostPort: 10004,
      host,
      sshPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGivenByTheApi agent@p2",
    });
    expect(byType(resources, "sandbox:crypto:SshKeyPair")).toEqual([]);
    expect(one(resources, "sandbox:docker:Container").inputs.env.SSH_PUBLIC_KEY).toBe(
      "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGivenByTheApi agent@p2",
    );
  });

  it("refuses anything but an OpenSSH ed25519 public key", () => {
    const base = {
      projectId: "p2",
      ownerId: "u",
      mode: "local",
      image: "i",
      subnet: "10.100.4.0/24",
      sshHostPort: 10004,
      host,
    };
    expect(TenantSpec.safeParse({ ...base, sshPublicKey: "ssh-rsa AAAA" }).success).toBe(false);
    expect(TenantSpec.safeParse({ ...base, sshPublicKey: "ssh-ed25519 AAAA\nmore" }).success).toBe(false);
  });
});

describe("IAM condition text", () => {
  it("confines read-write to projects/<id>/ with the trailing slash, so p1 never matches p10", () => {
    const [objects, listing, shared] = bucketPrefixConditions("b", "p1");
    expect(objects).toEqual({
      role: "roles/storage.objectAdmin",
      title: "project p1 objects",
      description: "read-write on gs://b/projects/p1/ only",
      expression: 'resource.name.startsWith("projects/_/buckets/b/objects/projects/p1/")',
    });
    expect(listing?.expression).toBe(
      'resource.type == "storage.googleapis.com/Bucket" && (api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("projects/p1/") || api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("shared/"))',
    );
    expect(shared).toMatchObject({
      role: "roles/storage.objectViewer",
      expression: 'resource.name.startsWith("projects/_/buckets/b/objects/shared/")',
    });
    const allows = (name: string) => name.startsWith("projects/_/buckets/b/objects/projects/p1/");
    expect(allows("projects/_/buckets/b/objects/projects/p1/workspace/a.txt")).toBe(true);
    expect(allows("projects/_/buckets/b/objects/projects/p10/workspace/a.txt")).toBe(false);
  });
});

describe("bad input fails before any resource is declared", () => {
  it.each([
    [{ projectId: "P1" }, /projectId/],
    [{ projectId: "p1", subnet: "10.100.3.0/16" }, /subnet/],
    [{ projectId: "p1", mode: "gcp" }, /gcp/],
    [{ projectId: "p1", limits: { memoryMiB: 64 } }, /memoryMiB/],
    [{ projectId: "p1", sshHostPort: 22 }, /sshHostPort/],
    [{ projectId: "p1", protectedPaths: ["../etc"] }, /protectedPaths/],
  ])("%j", (override, message) => {
    const base = {
      ownerId: "u",
      mode: "local",
      image: "i",
      subnet: "10.100.3.0/24",
      sshHostPort: 10003,
      host,
    };
    const parsed = TenantSpec.safeParse({ ...base, ...override });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((i) => i.path.join(".")).join(" ")).toMatch(message);
  });

  it("an allowlist with an IP address or a wildcard is refused by the egress component, naming the entry", async () => {
    const { validateTenantEgressArgs } = await import("../../components/tenant/egress.js");
    expect(validateTenantEgressArgs({ allowlist: ["github.com", "1.2.3.4", "*.evil.com"] })).toEqual([
      'allowlist entry "1.2.3.4": must be a host name like api.example.com or .example.com (no IP addresses, no wildcards)',
      'allowlist entry "*.evil.com": must be a host name like api.example.com or .example.com (no IP addresses, no wildcards)',
    ]);
  });
});

describe("Tenant with project secrets and a credential gateway", () => {
  let resources: Registered[];
  const files = (): Record<string, Registered["inputs"]> =>
    Object.fromEntries(byType(resources, "sandbox:host:File").map((f) => [f.inputs.path, f.inputs]));
  beforeAll(async () => {
    resources = await declare({ ...localSpec, host: { ...host, gatewayPort: 3180 } }, [
      { name: "MY_TOKEN", delivery: "env", value: "it's-a-token" },
      { name: "DEPLOY_KEY", delivery: "file", value: "deploy-key-value" },
      { name: "ANTHROPIC_API_KEY", delivery: "gateway", value: "sk-ant-real" },
    ]);
  });

  it("writes env and file secrets as secret host files; a gateway key is never written", () => {
    const dir = "/var/lib/agent-sandbox/tenant-secrets/p1";
    expect(Object.keys(files()).sort()).toEqual([`${dir}/DEPLOY_KEY`, `${dir}/MY_TOKEN`, `${dir}/agent.env`]);
    for (const file of Object.values(files())) {
      expect(file.content[SECRET_SIG]).toBe(SECRET_VALUE_SIG);
      expect(file.mode).toBe("0444");
    }
    expect(files()[`${dir}/DEPLOY_KEY`]!.content.value).toBe("deploy-key-value");
    expect(JSON.stringify(resources)).not.toContain("sk-ant-real");
  });

  it("agent.env exports env secrets (quoted), and for the gateway key a placeholder and its base URL", () => {
    const env = files()["/var/lib/agent-sandbox/tenant-secrets/p1/agent.env"]!.content.value;
    expect(env.split("\n").filter((line: string) => line.startsWith("export"))).toEqual([
      "export ANTHROPIC_API_KEY='sbx-credential-gateway-placeholder'",
      "export ANTHROPIC_BASE_URL='http://10.100.3.1:3180/anthropic'",
      "export MY_TOKEN='it'\\''s-a-token'",
    ]);
  });

  it("the gateway address bypasses the proxy, and the firewall accepts the gateway's port from the tenant only", () => {
    const container = one(resources, "sandbox:docker:Container").inputs;
    expect(container.env.value ?? container.env).toMatchObject({
      NO_PROXY: "localhost,127.0.0.1,10.100.3.1",
    });
    expect(one(resources, "sandbox:host:TenantFirewall").inputs).toMatchObject({ gatewayPort: 3180 });
  });
});

describe("Tenant (microVM backend)", () => {
  const microvm = {
    kernel: "/cache/microvm/kernel/vmlinuz",
    initrd: "/cache/microvm/kernel/initrd.img",
    accelerator: "kvm",
    stateRoot: "/var/lib/agent-sandbox/microvm/vms",
    platformKey: "ssh-ed25519 AAAAplatform agent-sandbox-platform",
  };
  const vmOf = (resources: Registered[]) => {
    const vm = one(resources, "sandbox:vm:MicroVM").inputs;
    const env = vm.env[SECRET_SIG] === SECRET_VALUE_SIG ? vm.env.value : vm.env;
    return { vm, env: env as Record<string, string> };
  };

  it("local: a backup disk a fifth larger than the home, the backup remote on it, no storage token", async () => {
    const resources = await declare({ ...localSpec, backend: "microvm", microvm });
    expect(byType(resources, "sandbox:docker:Container")).toEqual([]);
    const { vm, env } = vmOf(resources);
    expect(vm).toMatchObject({
      stateDir: "/var/lib/agent-sandbox/microvm/vms/p1",
      accelerator: "kvm",
      homeSizeMiB: 10 * 1024,
      backupSizeMiB: Math.ceil(10 * 1024 * 1.2),
      rootKeys: [microvm.platformKey],
    });
    expect(env.GCS_TOKEN_FILE).toBeUndefined();
  });

  it("gcp: the tenant's identity as a container's, the token file's path, no backup disk, no key anywhere", async () => {
    const resources = await declare({
      ...localSpec,
      mode: "gcp",
      gcp: { project: "gcp-project", bucket: "sandbox-bucket" },
      backend: "microvm",
      microvm,
    });
    const { vm, env } = vmOf(resources);
    expect(env).toMatchObject({
      GCS_TOKEN_FILE: "/run/secrets/gcs-token.json",
      BACKUP_REMOTE: ":gcs:sandbox-bucket/projects/p1/workspace",
    });
    expect(Object.keys(env).filter((k) => /GCS_SA|_KEY_FILE|CREDENTIALS/.test(k))).toEqual([]);
    // The remote is the bucket: no disk for a local one.
    expect(vm.backupSizeMiB).toBeUndefined();
    // The token is the runtime's to install: never a file of the stack, never on the configuration disk.
    expect(Object.keys(vm.files.value ?? vm.files ?? {})).not.toContain("gcs-token.json");
    expect(one(resources, "gcp:serviceaccount/account:Account").inputs.accountId).toMatch(
      /^sbx-[0-9a-f]{20}$/,
    );
    expect(resources.filter((r) => /key:Key$|hmacKey|HmacKey/.test(r.type))).toEqual([]);
    expect(byType(resources, "gcp:storage/bucketIAMMember:BucketIAMMember")).toHaveLength(3);
  });
});
