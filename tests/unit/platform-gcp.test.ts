// The gcp platform stack under Pulumi mocks: every resource gcpPlatform declares, with the properties the
// issue asks for (firewall ports and sources, lifecycle ages, cleanup policy, roles and their scopes, IAM
// condition text, the VM's scopes and startup script, GKE behind its flag, the stack outputs).
import * as pulumi from "@pulumi/pulumi";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parse as parseYaml } from "yaml";
import { beforeAll, describe, expect, it } from "vitest";
import type { ResourceValidationArgs } from "@pulumi/policy";
import type { PlatformOutputs } from "../../stacks/platform/outputs.js";
import * as runtimeAccess from "../../components/kubernetes/runtime-access.js";

interface Registered {
  type: string;
  name: string;
  inputs: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  provider?: string;
}
const registered: Registered[] = [];
/** How the engine marks a secret value on the wire (pulumi/sdk runtime rpc.ts). */
const SECRET_SIG = "4dabf18193072939515e22adb298388d";
const SECRET_VALUE_SIG = "1b47061264138c4ac30d75fd1eb44270";
const HOST_IP = "203.0.113.10";
const PROJECT = "sandbox-prod";
const BUCKET = "sandbox-prod-data";
const DOMAIN = "sandboxes.example.test";
/** The front door of the startup scripts rendered here directly. */
const FRONT_DOOR = {
  domain: DOMAIN,
  issuer: { module: "acme" as const, email: "ops@example.test" },
  adminPort: 2019,
  apiPort: 8000,
  terminalPort: 9000,
};

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- mock inputs are untyped wire values
function mockId(type: string, name: string, inputs: Record<string, any>): string {
  switch (type) {
    case "gcp:kms/keyRing:KeyRing":
      return `projects/${inputs.project}/locations/${inputs.location}/keyRings/${inputs.name}`;
    case "gcp:kms/cryptoKey:CryptoKey":
      return `${inputs.keyRing}/cryptoKeys/${inputs.name}`;
    case "gcp:compute/network:Network":
    case "gcp:compute/subnetwork:Subnetwork":
      return `projects/${PROJECT}/${name}`;
    default:
      return `${name}-id`;
  }
}

/** Outputs a real provider would compute, so the components can use them. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- mock inputs are untyped wire values
function computedOutputs(type: string, name: string, inputs: Record<string, any>): Record<string, unknown> {
  switch (type) {
    case "gcp:serviceaccount/account:Account":
      return {
        email: `${inputs.accountId}@${PROJECT}.iam.gserviceaccount.com`,
        name: `projects/${PROJECT}/serviceAccounts/${inputs.accountId}@${PROJECT}.iam.gserviceaccount.com`,
      };
    case "gcp:storage/bucket:Bucket":
      return { url: `gs://${inputs.name}` };
    case "gcp:compute/address:Address":
      return { address: HOST_IP };
    case "gcp:compute/firewall:Firewall":
    case "gcp:compute/instance:Instance":
    case "gcp:compute/disk:Disk":
    case "gcp:container/nodePool:NodePool":
      return { name };
    case "gcp:container/cluster:Cluster":
      return { name, endpoint: "198.51.100.7", masterAuth: { clusterCaCertificate: "Q0EtUEVN" } };
    case "gcp:storage/bucketObject:BucketObject":
      return { mediaLink: `https://storage.googleapis.com/download/${inputs.name}` };
    case "docker:index/image:Image":
      return { repoDigest: `${String(inputs.imageName).split(":")[0]}@sha256:${"0".repeat(64)}` };
    default:
      return {};
  }
}

let gcpPlatform: typeof import("../../stacks/platform/gcp.js").gcpPlatform;
let parseStackConfig: typeof import("../../stacks/config.js").parseStackConfig;
let render: typeof import("../../lib/host/render.js");
let startup: typeof import("../../components/gcp/startup-script.js");
let sandboxImage: typeof import("../../components/gcp/sandbox-image.js");
let network: typeof import("../../components/gcp/network.js");

beforeAll(async () => {
  await pulumi.runtime.setMocks(
    {
      newResource(args) {
        registered.push({ type: args.type, name: args.name, inputs: args.inputs, provider: args.provider });
        return {
          id: mockId(args.type, args.name, args.inputs),
          state: { ...args.inputs, ...computedOutputs(args.type, args.name, args.inputs) },
        };
      },
      call(args) {
        if (args.token === "gcp:organizations/getProject:getProject")
          return { projectId: args.inputs.projectId, number: "123456789012" };
        if (args.token === "gcp:organizations/getClientConfig:getClientConfig")
          return { accessToken: "ya29.mock", project: PROJECT, region: "europe-west1", zone: "" };
        throw new Error(`unexpected call to ${args.token}`);
      },
    },
    "agent-sandbox",
    "gcp",
    false,
  );
  ({ gcpPlatform } = await import("../../stacks/platform/gcp.js"));
  ({ parseStackConfig } = await import("../../stacks/config.js"));
  render = await import("../../lib/host/render.js");
  startup = await import("../../components/gcp/startup-script.js");
  sandboxImage = await import("../../components/gcp/sandbox-image.js");
  network = await import("../../components/gcp/network.js");
});

/** A build context with everything the sandbox Dockerfile copies (vendor/ staged). */
function stagedContext(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sandbox-context-"));
  writeFileSync(
    path.join(dir, "Dockerfile"),
    "ARG BASE_IMAGE=ubuntu:24.04\nFROM ${BASE_IMAGE}\nCOPY vendor/ca/ /usr/local/share/ca-certificates/\nCOPY vendor/node/ /usr/local/\nCOPY rootfs/ /\n",
  );
  for (const sub of ["vendor/ca", "vendor/node/bin", "rootfs/etc"])
    mkdirSync(path.join(dir, sub), { recursive: true });
  writeFileSync(path.join(dir, "vendor/node/bin/node"), "node");
  writeFileSync(path.join(dir, "rootfs/etc/hello"), "hello");
  return dir;
}

const stackConfig = (gcp: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) =>
  parseStackConfig(
    {
      "agent-sandbox:target": "gcp",
      "agent-sandbox:gcp": {
        project: PROJECT,
        bucket: BUCKET,
        domain: DOMAIN,
        adminSourceRanges: ["198.51.100.0/24"],
        sandboxImageContext: stagedContext(),
        ...gcp,
      },
      ...extra,
    },
    "Pulumi.gcp.yaml",
  );

interface Declared {
  resources: Registered[];
  outputs: Record<keyof PlatformOutputs, string>;
}

async function declare(config: ReturnType<typeof stackConfig>): Promise<Declared> {
  registered.length = 0;
  const outputs = gcpPlatform(config);
  const resolved = await new Promise<Declared["outputs"]>((resolve) =>
    pulumi
      .all([
        outputs.apiUrl,
        outputs.terminalUrlBase,
        outputs.registry,
        outputs.bucket,
        outputs.stateBackendUrl,
        outputs.hostAddress,
      ])
      .apply(([apiUrl, terminalUrlBase, registry, bucket, stateBackendUrl, hostAddress]) =>
        resolve({ apiUrl, terminalUrlBase, registry, bucket, stateBackendUrl, hostAddress: hostAddress! }),
      ),
  );
  // The instance waits for the startup script, itself an apply over other outputs.
  await new Promise((resolve) => setTimeout(resolve, 100));
  return { resources: [...registered], outputs: resolved };
}

const byType = (resources: Registered[], type: string) => resources.filter((r) => r.type === type);
const one = (resources: Registered[], type: string) => {
  const found = byType(resources, type);
  expect(found, type).toHaveLength(1);
  return found[0]!;
};
/** Grants in a stable order (registration order depends on when outputs resolve). */
const sorted = <T extends { type?: string; role: string; condition?: { title: string } }>(list: T[]) =>
  [...list].sort((a, b) =>
    `${a.type}/${a.role}/${a.condition?.title}`.localeCompare(`${b.type}/${b.role}/${b.condition?.title}`),
  );
/** What the policy pack reports for the declared resources, as the engine would call it in a preview. */
async function policyViolations(resources: Registered[]): Promise<string[]> {
  const { platformPolicies } = await import("../../policy/rules.js");
  const found: string[] = [];
  for (const r of resources)
    for (const policy of platformPolicies)
      for (const validate of [policy.validateResource ?? []].flat())
        await validate({ type: r.type, props: r.inputs } as unknown as ResourceValidationArgs, (message) =>
          found.push(`${r.name}: ${policy.name}: ${message}`),
        );
  return found;
}
const portRange = (ports: string): [number, number] => {
  const [low, high] = ports.split("-").map(Number) as [number, number?];
  return [low, high ?? low];
};

describe("gcp platform (defaults)", () => {
  let declared: Declared;
  let resources: Registered[];
  beforeAll(async () => {
    declared = await declare(stackConfig());
    resources = declared.resources;
  });

  it("prints the stack outputs the runtime and the README rely on", () => {
    expect(declared.outputs).toEqual({
      apiUrl: `https://${DOMAIN}`,
      terminalUrlBase: `wss://${DOMAIN}/terminal`,
      hostAddress: HOST_IP,
      registry: `europe-west1-docker.pkg.dev/${PROJECT}/sandboxes`,
      bucket: BUCKET,
      stateBackendUrl: `gs://${BUCKET}/state`,
    });
  });

  it("one firewall rule per flow, each described, targeting the host's tag, with its own sources", () => {
    const allows = byType(resources, "gcp:compute/firewall:Firewall").filter((r) => r.inputs.allows);
    const flows = allows.map((r) => ({
      ports: r.inputs.allows.flatMap((a: { ports: string[] }) => a.ports),
      protocols: r.inputs.allows.map((a: { protocol: string }) => a.protocol),
      sourceRanges: r.inputs.sourceRanges,
    }));
    expect(flows).toEqual([
      { ports: ["22"], protocols: ["tcp"], sourceRanges: ["198.51.100.0/24"] },
      { ports: ["443"], protocols: ["tcp"], sourceRanges: ["0.0.0.0/0"] },
      { ports: ["80"], protocols: ["tcp"], sourceRanges: ["0.0.0.0/0"] },
      { ports: ["10000-11000"], protocols: ["tcp"], sourceRanges: ["0.0.0.0/0"] },
    ]);
    for (const rule of allows) {
      expect(rule.inputs.direction).toBe("INGRESS");
      expect(rule.inputs.targetTags).toEqual(["agent-sandbox-host"]);
      expect(rule.inputs.description.length, rule.name).toBeGreaterThan(20);
      expect(rule.inputs.network).toBe(`projects/${PROJECT}/platform-vpc`);
    }
  });

  it("no rule opens 3128, and everything else is denied by an explicit lowest-priority rule", () => {
    const rules = byType(resources, "gcp:compute/firewall:Firewall");
    for (const rule of rules) {
      for (const allow of rule.inputs.allows ?? []) {
        expect(allow.ports, `${rule.name} opens every port`).toBeDefined();
        for (const ports of allow.ports) {
          const [low, high] = portRange(ports);
          expect(3128 >= low && 3128 <= high, `${rule.name} opens ${ports}`).toBe(false);
        }
      }
    }
    const deny = rules.filter((r) => r.inputs.denies);
    expect(deny).toHaveLength(1);
    expect(deny[0]!.inputs).toMatchObject({
      direction: "INGRESS",
      priority: 65534,
      denies: [{ protocol: "all" }],
      sourceRanges: ["0.0.0.0/0"],
    });
    expect(deny[0]!.inputs.description).toMatch(/Everything else closed/);
    const net = one(resources, "gcp:compute/network:Network").inputs;
    expect(net.autoCreateSubnetworks).toBe(false);
    expect(one(resources, "gcp:compute/subnetwork:Subnetwork").inputs).toMatchObject({
      ipCidrRange: "10.10.0.0/24",
      region: "europe-west1",
      privateIpGoogleAccess: true,
      secondaryIpRanges: [],
    });
  });

  it("the bucket is never public, versioned, and deletes noncurrent data 30 days after it became noncurrent", () => {
    const bucket = one(resources, "gcp:storage/bucket:Bucket").inputs;
    expect(bucket).toMatchObject({
      name: BUCKET,
      project: PROJECT,
      location: "EUROPE-WEST1",
      uniformBucketLevelAccess: true,
      publicAccessPrevention: "enforced",
      versioning: { enabled: true },
      softDeletePolicy: { retentionDurationSeconds: 7 * 24 * 3600 },
      forceDestroy: false,
      labels: { "managed-by": "agent-sandbox", stack: "gcp" },
    });
    expect(bucket.lifecycleRules).toEqual([
      { action: { type: "Delete" }, condition: { daysSinceNoncurrentTime: 30, withState: "ARCHIVED" } },
      { action: { type: "AbortIncompleteMultipartUpload" }, condition: { age: 1 } },
    ]);
    // No rule deletes live objects by age: that would delete live backups and tenant state.
    for (const rule of bucket.lifecycleRules) {
      if (rule.action.type === "Delete") expect(rule.condition.withState).toBe("ARCHIVED");
    }
  });

  it("a KMS key ring and key for the tenant stacks' secrets, at the name the runtime's gcpkms:// uses", () => {
    expect(one(resources, "gcp:kms/keyRing:KeyRing").inputs).toMatchObject({
      project: PROJECT,
      location: "europe-west1",
      name: "agent-sandbox",
    });
    expect(one(resources, "gcp:kms/cryptoKey:CryptoKey").inputs).toMatchObject({
      keyRing: `projects/${PROJECT}/locations/europe-west1/keyRings/agent-sandbox`,
      name: "tenant-state",
      purpose: "ENCRYPT_DECRYPT",
      rotationPeriod: "7776000s",
    });
  });

  it("Artifact Registry `sandboxes` (docker) keeps the 5 most recent versions per package and deletes the rest", () => {
    const repo = one(resources, "gcp:artifactregistry/repository:Repository").inputs;
    expect(repo).toMatchObject({
      project: PROJECT,
      location: "europe-west1",
      repositoryId: "sandboxes",
      format: "DOCKER",
      cleanupPolicyDryRun: false,
    });
    expect(repo.cleanupPolicies).toEqual([
      { id: "keep-5-most-recent", action: "KEEP", mostRecentVersions: { keepCount: 5 } },
      { id: "delete-the-rest", action: "DELETE", condition: { tagState: "ANY", olderThan: "3600s" } },
    ]);
  });

  it("the required APIs are enabled, and not disabled by a destroy", () => {
    const services = byType(resources, "gcp:projects/service:Service");
    expect(services.map((s) => s.inputs.service).sort()).toEqual(
      [
        "artifactregistry.googleapis.com",
        "cloudkms.googleapis.com",
        "compute.googleapis.com",
        "iam.googleapis.com",
        "iamcredentials.googleapis.com",
        "storage.googleapis.com",
      ].sort(),
    );
    for (const s of services) expect(s.inputs).toMatchObject({ project: PROJECT, disableOnDestroy: false });
  });

  /** Every IAM grant: role, member, and the resource it is bound to. */
  const grants = (all: Registered[]) =>
    all
      .filter((r) => /IAM|Iam/.test(r.type))
      .map((r) => ({
        type: r.type.split(":").pop(),
        role: r.inputs.role as string,
        member: r.inputs.member as string,
        scope:
          r.inputs.bucket ??
          r.inputs.repository ??
          r.inputs.cryptoKeyId ??
          r.inputs.serviceAccountId ??
          `project ${r.inputs.project}`,
        condition: r.inputs.condition,
      }));

  it("the Project Service account has exactly the seed's roles, each at its narrowest scope", () => {
    const account = byType(resources, "gcp:serviceaccount/account:Account").find(
      (a) => a.inputs.accountId === "project-service-sa",
    );
    expect(account?.inputs.displayName).toBe("Agent Platform - Project Service");
    const member = `serviceAccount:project-service-sa@${PROJECT}.iam.gserviceaccount.com`;
    expect(sorted(grants(resources).filter((g) => g.member === member))).toEqual(
      sorted([
        {
          type: "IAMMember",
          role: "roles/iam.serviceAccountAdmin",
          member,
          scope: `project ${PROJECT}`,
          condition: undefined,
        },
        { type: "BucketIAMMember", role: "roles/storage.admin", member, scope: BUCKET, condition: undefined },
        {
          type: "RepositoryIamMember",
          role: "roles/artifactregistry.repoAdmin",
          member,
          scope: "sandboxes",
          condition: undefined,
        },
      ]),
    );
    expect(byType(resources, "gcp:serviceaccount/key:Key")).toHaveLength(0); // impersonated, never a key
  });

  it("the host VM's account has no project-level role: impersonation, the state key, pulls, and conditioned bucket access", () => {
    const member = `serviceAccount:agent-sandbox-host@${PROJECT}.iam.gserviceaccount.com`;
    const objects = `projects/_/buckets/${BUCKET}/objects/`;
    expect(sorted(grants(resources).filter((g) => g.member === member))).toEqual(
      sorted([
        {
          type: "IAMMember",
          role: "roles/iam.serviceAccountTokenCreator",
          member,
          scope: `projects/${PROJECT}/serviceAccounts/project-service-sa@${PROJECT}.iam.gserviceaccount.com`,
          condition: undefined,
        },
        {
          type: "CryptoKeyIAMMember",
          role: "roles/cloudkms.cryptoKeyEncrypterDecrypter",
          member,
          scope: `projects/${PROJECT}/locations/europe-west1/keyRings/agent-sandbox/cryptoKeys/tenant-state`,
          condition: undefined,
        },
        {
          type: "RepositoryIamMember",
          role: "roles/artifactregistry.reader",
          member,
          scope: "sandboxes",
          condition: undefined,
        },
        {
          type: "BucketIAMMember",
          role: "roles/storage.objectAdmin",
          member,
          scope: BUCKET,
          condition: {
            title: "tenant stack state",
            description: `read-write on gs://${BUCKET}/state/ only`,
            expression: `resource.name.startsWith("${objects}state/")`,
          },
        },
        {
          type: "BucketIAMMember",
          role: "roles/storage.objectViewer",
          member,
          scope: BUCKET,
          condition: {
            title: "tenant stack state listing",
            description: `list gs://${BUCKET}/state/ only`,
            expression: `resource.type == "storage.googleapis.com/Bucket" && api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("state/")`,
          },
        },
        {
          type: "BucketIAMMember",
          role: "roles/storage.objectViewer",
          member,
          scope: BUCKET,
          condition: {
            title: "runtime releases",
            description: `read gs://${BUCKET}/releases/ only`,
            expression: `resource.name.startsWith("${objects}releases/")`,
          },
        },
      ]),
    );
  });

  it("no primitive role and no public member anywhere", () => {
    for (const grant of grants(resources)) {
      expect(["roles/owner", "roles/editor", "roles/viewer"]).not.toContain(grant.role);
      expect(grant.member).not.toMatch(/^allUsers$|^allAuthenticatedUsers$/);
    }
  });

  it("no service-account or HMAC key anywhere: every credential is minted by impersonation (issue 21)", () => {
    expect(resources.length).toBeGreaterThan(20);
    expect(resources.filter((r) => /serviceaccount\/key:Key|hmacKey:HmacKey/.test(r.type))).toEqual([]);
    expect(JSON.stringify(resources.map((r) => r.inputs))).not.toMatch(/private_key|privateKey/);
  });

  it("the host VM: its own account with the cloud-platform scope, tag, OS Login, Shielded VM, the data disk, the static IP", () => {
    const vm = one(resources, "gcp:compute/instance:Instance").inputs;
    expect(vm).toMatchObject({
      project: PROJECT,
      zone: "europe-west1-b",
      machineType: "e2-standard-4",
      tags: ["agent-sandbox-host"],
      canIpForward: false,
      bootDisk: { initializeParams: { image: "debian-cloud/debian-13", size: 30 } },
      attachedDisks: [{ source: "host-data-id", deviceName: "agent-sandbox-data", mode: "READ_WRITE" }],
      networkInterfaces: [
        { subnetwork: `projects/${PROJECT}/platform-subnet`, accessConfigs: [{ natIp: HOST_IP }] },
      ],
      serviceAccount: {
        email: `agent-sandbox-host@${PROJECT}.iam.gserviceaccount.com`,
        scopes: ["https://www.googleapis.com/auth/cloud-platform"],
      },
      shieldedInstanceConfig: { enableSecureBoot: true, enableVtpm: true, enableIntegrityMonitoring: true },
      metadata: { "enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE" },
    });
    expect(one(resources, "gcp:compute/disk:Disk").inputs).toMatchObject({
      zone: "europe-west1-b",
      size: 200,
    });
  });

  it("the startup script installs the host baseline rendered from host-config/ (the local target's sources)", () => {
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    expect(script.startsWith("#!/bin/bash\n")).toBe(true);
    expect(script).toMatch(/^apt-get install .*\bdocker\.io\b.*\bsquid\b/m);
    expect(script).toContain(
      render.renderSquidConf({
        port: 3128,
        configDir: "/etc/agent-sandbox",
        logDir: "/var/log/agent-sandbox",
        runDir: "/run/agent-sandbox",
      }),
    );
    expect(script).toContain(render.renderSquidBaselineFragment());
    expect(script).toContain(render.renderFirewallScript());
    for (const unit of ["agent-sandbox-firewall", "agent-sandbox-squid", "agent-sandbox-runtime"])
      expect(script).toContain(render.renderHostConfig(`systemd/${unit}.service`, {}));
    // Squid as a systemd service, the distribution's own off; ip6 forwarding dropped; metadata blocked.
    expect(script).toContain("systemctl disable --now squid.service");
    expect(script).toMatch(/^systemctl enable .*agent-sandbox-squid\.service/m);
    expect(script).toContain("net.ipv6.conf.all.forwarding = 0");
    expect(script).toMatch(/ip6tables -w -C FORWARD -j SANDBOX-FORWARD/);
    expect(script).toMatch(/iptables -w -C SANDBOX-FORWARD -i sbx-\+ -d 169\.254\.169\.254\/32/);
    // Runtime + Postgres as units, Postgres on loopback with its data on the data disk.
    expect(script).toContain(
      "-p 127.0.0.1:5432:5432 -v /var/lib/agent-sandbox/postgres:/var/lib/postgresql/data postgres:16-alpine",
    );
    expect(script).toMatch(/^systemctl restart agent-sandbox-runtime\.service$/m);
    // The engine the runtime runs finds the plugins where the script installs them (its home is not /root).
    const pulumiHome = /^PULUMI_HOME=(\S+) \S+\/pulumi plugin install resource gcp /m.exec(script)?.[1];
    expect(pulumiHome).toBe("/var/cache/agent-sandbox/pulumi-home");
    // No cluster, no Kubernetes provider to fetch.
    expect(script).not.toContain("plugin install resource kubernetes");
    expect(render.renderHostConfig("systemd/agent-sandbox-runtime.service", {})).toContain(
      `Environment=PULUMI_HOME=${pulumiHome}`,
    );
    // Secrets made on the VM, never in the script.
    expect(script).toContain("openssl rand -hex 24 >/var/lib/agent-sandbox/postgres.password");
    expect(script).not.toMatch(/PASSWORD=[A-Za-z0-9]/);
    expect(script).not.toContain("ya29.mock");
  });

  it("the runtime's stack file on the VM is a valid gcp stack config with the platform's values filled in", () => {
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    const match =
      /cat >\/etc\/agent-sandbox\/stack\.yaml\.new <<'AGENT_SANDBOX_EOF'\n([\s\S]*?)\nAGENT_SANDBOX_EOF/.exec(
        script,
      );
    expect(match).not.toBeNull();
    const document = parseYaml(match![1]!) as { config: Record<string, unknown> };
    const config = parseStackConfig(document.config, "stack.yaml");
    expect(config.target).toBe("gcp");
    // Behind the front door: on loopback, trusting it for the client's address, its URLs on the domain.
    expect(config.runtime).toMatchObject({
      listenHost: "127.0.0.1",
      publicHost: DOMAIN,
      apiPort: 8000,
      terminalUrlBase: `wss://${DOMAIN}/terminal`,
      consoleOrigins: [`https://${DOMAIN}`],
      trustedProxies: ["127.0.0.1"],
    });
    expect(config.tenants.image).toMatch(
      new RegExp(`^europe-west1-docker\\.pkg\\.dev/${PROJECT}/sandboxes/sandbox:[0-9a-f]{16}$`),
    );
    expect(config.gcp).toMatchObject({
      project: PROJECT,
      bucket: BUCKET,
      kmsKey: `projects/${PROJECT}/locations/europe-west1/keyRings/agent-sandbox/cryptoKeys/tenant-state`,
      impersonateServiceAccount: `project-service-sa@${PROJECT}.iam.gserviceaccount.com`,
    });
  });

  it("the sandbox image is built from the context and pushed to the registry, tagged by content", () => {
    const image = one(resources, "docker:index/image:Image").inputs;
    expect(image.imageName).toMatch(
      new RegExp(`^europe-west1-docker\\.pkg\\.dev/${PROJECT}/sandboxes/sandbox:[0-9a-f]{16}$`),
    );
    expect(image.build).toMatchObject({ platform: "linux/amd64", args: { BASE_IMAGE: "ubuntu:24.04" } });
    expect(image.build.args.IMAGE_VERSION).toBe(image.imageName.split(":").pop());
    // The registry block carries the caller's access token: marked secret as a whole.
    expect(image.registry[SECRET_SIG]).toBe(SECRET_VALUE_SIG);
    expect(image.registry.value).toEqual({
      server: "europe-west1-docker.pkg.dev",
      username: "oauth2accesstoken",
      password: "ya29.mock",
    });
  });

  it("the front door: Caddy serves the API and terminals on the domain over TLS, from the data disk, as its own user", () => {
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    expect(script).toMatch(/^apt-get install .*\bcaddy\b/m);
    expect(script).toContain("systemctl disable --now squid.service caddy.service");
    const caddy = JSON.parse(
      /cat >\/etc\/agent-sandbox\/caddy\/front-door\.json\.new <<'AGENT_SANDBOX_EOF'\n([\s\S]*?)\nAGENT_SANDBOX_EOF/.exec(
        script,
      )![1]!,
    );
    expect(caddy.admin.listen).toBe("127.0.0.1:2019");
    expect(caddy.storage).toEqual({ module: "file_system", root: "/mnt/disks/agent-sandbox/caddy" });
    expect(caddy.apps.http).toMatchObject({ http_port: 80, https_port: 443 });
    const server = caddy.apps.http.servers.front_door;
    expect(server.listen).toEqual([":443"]);
    expect(server.automatic_https).toBeUndefined(); // Caddy's automatic HTTPS: certificates and redirects
    expect(server.routes[0]).toEqual({
      "@id": "front-door-platform",
      match: [{ host: [DOMAIN] }],
      handle: [
        {
          handler: "subroute",
          routes: [
            {
              match: [{ path: ["/terminal", "/terminal/*"] }],
              handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:9000" }] }],
            },
            { handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:8000" }] }] },
          ],
        },
      ],
      terminal: true,
    });
    // E2B's SDKs on the domain (docs/e2b.md): the control plane at api.<domain>, envd at 49983-<id>.<domain>,
    // both the runtime's /e2b, the envd host's id the one the runtime is told.
    expect(server.routes[1]).toEqual({
      "@id": "front-door-e2b-api",
      match: [{ host: [`api.${DOMAIN}`] }],
      handle: [
        { handler: "rewrite", uri: "/e2b{http.request.uri}" },
        { handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:8000" }] },
      ],
      terminal: true,
    });
    expect(server.routes[2]).toMatchObject({
      "@id": "front-door-e2b-envd",
      handle: [
        { handler: "headers", request: { set: { "E2b-Sandbox-Id": ["{http.regexp.e2benvd.1}"] } } },
        { handler: "rewrite", uri: "/e2b{http.request.uri}" },
        { handler: "reverse_proxy", upstreams: [{ dial: "127.0.0.1:8000" }] },
      ],
    });
    const envdHost = new RegExp(
      server.routes[2].match[0].header_regexp.Host.pattern.replace("(?i)", ""),
      "i",
    );
    expect(envdHost.exec(`49983-0f3a9c2b-7d41-4e5a-9b1c-2d3e4f5a6b7c.${DOMAIN}`)?.[1]).toBe(
      "0f3a9c2b-7d41-4e5a-9b1c-2d3e4f5a6b7c",
    );
    for (const other of [
      `3000-0f3a9c2b-7d41-4e5a-9b1c-2d3e4f5a6b7c.${DOMAIN}`,
      `49983-x.${DOMAIN}`,
      "49983-0f3a9c2b-7d41-4e5a-9b1c-2d3e4f5a6b7c.sandboxes-example.test",
    ])
      expect(envdHost.test(other), other).toBe(false);
    expect(server.routes.at(-1)["@id"]).toBe("front-door-default");
    // Let's Encrypt (Caddy's default ACME directory) unless gcp.tls says otherwise: the platform's names at
    // start, every other name under the domain at its first handshake once the runtime says it serves it.
    expect(caddy.apps.tls.automation.policies).toEqual([
      { subjects: [DOMAIN, `api.${DOMAIN}`], issuers: [{ module: "acme" }] },
      { subjects: [`*.${DOMAIN}`], issuers: [{ module: "acme" }], on_demand: true },
    ]);
    expect(caddy.apps.tls.automation.on_demand).toEqual({ ask: "http://127.0.0.1:8000/front-door/tls-ask" });
    const unit = render.renderHostConfig("systemd/agent-sandbox-caddy.service", {
      config: "/etc/agent-sandbox/caddy/front-door.json",
    });
    expect(script).toContain(unit);
    expect(unit).toMatch(/^User=caddy$/m);
    expect(unit).toMatch(/^AmbientCapabilities=CAP_NET_BIND_SERVICE$/m);
    expect(unit).toMatch(
      /^ExecStart=\/usr\/bin\/caddy run --config \/etc\/agent-sandbox\/caddy\/front-door\.json$/m,
    );
    expect(script).toContain("install -d -o caddy -g caddy -m 0700 /mnt/disks/agent-sandbox/caddy");
    expect(script).toMatch(/^systemctl enable .*agent-sandbox-caddy\.service/m);
    expect(script).toMatch(/^systemctl restart .*agent-sandbox-caddy\.service$/m);
    expect(script).toContain("Wants=agent-sandbox-caddy.service");
  });

  it("gcp.tls picks the front door's issuer: an ACME directory and contact, or Caddy's own CA", async () => {
    const issuers = async (tls: Record<string, unknown>) => {
      const { resources: declared } = await declare(stackConfig({ tls }));
      const script: string = one(declared, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
      const json = /front-door\.json\.new <<'AGENT_SANDBOX_EOF'\n([\s\S]*?)\nAGENT_SANDBOX_EOF/.exec(
        script,
      )![1]!;
      return JSON.parse(json).apps.tls.automation.policies[0].issuers;
    };
    expect(
      await issuers({ email: "ops@example.test", acmeDirectory: "https://acme.example.test/directory" }),
    ).toEqual([{ module: "acme", email: "ops@example.test", ca: "https://acme.example.test/directory" }]);
    expect(await issuers({ issuer: "internal" })).toEqual([{ module: "internal" }]);
  });

  it("the runtime release goes to releases/ of the bucket, named by content, and the script fetches that object", () => {
    const object = one(resources, "gcp:storage/bucketObject:BucketObject").inputs;
    expect(object.bucket).toBe(BUCKET);
    expect(object.name).toMatch(/^releases\/agent-sandbox-[0-9a-f]{16}\.zip$/);
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    expect(script).toContain(
      `https://storage.googleapis.com/storage/v1/b/${BUCKET}/o/${encodeURIComponent(object.name)}?alt=media`,
    );
  });

  it("no GKE cluster unless the flag is set", () => {
    expect(resources.filter((r) => r.type.startsWith("gcp:container/"))).toEqual([]);
    expect(byType(resources, "gcp:projects/service:Service").map((s) => s.inputs.service)).not.toContain(
      "container.googleapis.com",
    );
  });

  it("passes every rule of the policy pack", async () => {
    expect(await policyViolations(resources)).toEqual([]);
  });

  it("child names derive from their component's name", () => {
    const components = resources.filter((r) => r.type.startsWith("sandbox:gcp:"));
    const prefixes = components.map((c) => c.name);
    for (const r of resources.filter((r) => !r.type.startsWith("sandbox:gcp:")))
      expect(
        prefixes.some((prefix) => r.name.startsWith(`${prefix}-`)),
        r.name,
      ).toBe(true);
  });
});

describe("gcp platform with a budget and a 14-day retention of deleted data (issue 21)", () => {
  let resources: Registered[];
  beforeAll(async () => {
    resources = (
      await declare(
        stackConfig({
          deletedDataRetentionDays: 14,
          budget: { billingAccount: "01ABCD-23EF45-6789AB", monthlyAmount: 400, currency: "EUR" },
        }),
      )
    ).resources;
  });

  it("a monthly budget on the project's number alerting at 50/90/100 % spent and 100 % forecast", () => {
    expect(one(resources, "gcp:billing/budget:Budget").inputs).toEqual({
      billingAccount: "01ABCD-23EF45-6789AB",
      displayName: `agent-sandbox ${PROJECT}`,
      budgetFilter: { projects: ["projects/123456789012"] },
      amount: { specifiedAmount: { currencyCode: "EUR", units: "400" } },
      thresholdRules: [
        { thresholdPercent: 0.5, spendBasis: "CURRENT_SPEND" },
        { thresholdPercent: 0.9, spendBasis: "CURRENT_SPEND" },
        { thresholdPercent: 1, spendBasis: "CURRENT_SPEND" },
        { thresholdPercent: 1, spendBasis: "FORECASTED_SPEND" },
      ],
    });
    expect(byType(resources, "gcp:projects/service:Service").map((s) => s.inputs.service)).toContain(
      "billingbudgets.googleapis.com",
    );
  });

  it("the bucket deletes a deleted tenant's data (noncurrent versions) after the configured 14 days", () => {
    expect(one(resources, "gcp:storage/bucket:Bucket").inputs.lifecycleRules[0]).toEqual({
      action: { type: "Delete" },
      condition: { daysSinceNoncurrentTime: 14, withState: "ARCHIVED" },
    });
  });

  it("the registry still keeps 5 snapshots per tenant (one package per tenant: sandboxes/<project id>)", () => {
    expect(one(resources, "gcp:artifactregistry/repository:Repository").inputs.cleanupPolicies[0]).toEqual({
      id: "keep-5-most-recent",
      action: "KEEP",
      mostRecentVersions: { keepCount: 5 },
    });
  });

  it("passes every rule of the policy pack", async () => {
    expect(await policyViolations(resources)).toEqual([]);
  });

  it("a budget without its billing account, or a malformed one, is refused naming the key", () => {
    expect(() => stackConfig({ budget: { monthlyAmount: 100 } })).toThrow(/gcp\.budget\.billingAccount/);
    expect(() => stackConfig({ budget: { billingAccount: "nope" } })).toThrow(
      /gcp\.budget\.billingAccount: must be a billing account id/,
    );
    expect(() => stackConfig({ deletedDataRetentionDays: 0 })).toThrow(/gcp\.deletedDataRetentionDays/);
  });
});

describe("gcp platform with GKE enabled", () => {
  let resources: Registered[];
  beforeAll(async () => {
    resources = (await declare(stackConfig({ gke: { enabled: true, sandboxNodeCount: 2 } }))).resources;
  });

  it("the host installs Pulumi's Kubernetes provider at the version package.json pins, for the tenant stacks", async () => {
    const { pinnedKubernetesProviderVersion } = await import("../../lib/toolchain.js");
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    expect(script).toMatch(
      new RegExp(
        `^PULUMI_HOME=\\S+ \\S+/pulumi plugin install resource kubernetes ${pinnedKubernetesProviderVersion().replaceAll(".", "\\.")}$`,
        "m",
      ),
    );
  });

  it("a VPC-native cluster without its default pool, a system pool, and a gVisor (GKE Sandbox) pool", () => {
    const cluster = one(resources, "gcp:container/cluster:Cluster").inputs;
    expect(cluster).toMatchObject({
      location: "europe-west1-b",
      removeDefaultNodePool: true,
      networkingMode: "VPC_NATIVE",
      ipAllocationPolicy: {
        clusterSecondaryRangeName: "platform-pods",
        servicesSecondaryRangeName: "platform-services",
      },
      workloadIdentityConfig: { workloadPool: `${PROJECT}.svc.id.goog` },
    });
    const pools = byType(resources, "gcp:container/nodePool:NodePool");
    expect(pools).toHaveLength(2);
    const gvisor = pools.filter((p) => p.inputs.nodeConfig.sandboxConfig?.type === "GVISOR");
    expect(gvisor).toHaveLength(1);
    expect(gvisor[0]!.inputs).toMatchObject({
      nodeCount: 2,
      nodeConfig: {
        machineType: "e2-standard-4",
        imageType: "COS_CONTAINERD",
        serviceAccount: `agent-sandbox-gke-nodes@${PROJECT}.iam.gserviceaccount.com`,
        workloadMetadataConfig: { mode: "GKE_METADATA" },
      },
    });
    // The other pool runs GKE's system pods, which GKE Sandbox nodes do not accept.
    expect(pools.find((p) => p !== gvisor[0])!.inputs.nodeConfig.sandboxConfig).toBeUndefined();
  });

  it("the host's runtime gets the cluster's kubeconfig (root-only) and mints its own token for it", () => {
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    const file = (name: string) =>
      new RegExp(
        `cat >${name.replace(/[./]/g, "\\$&")}\\.new <<'AGENT_SANDBOX_EOF'\\n([\\s\\S]*?)\\nAGENT_SANDBOX_EOF`,
      ).exec(script)?.[1];
    const kubeconfig = file("/etc/agent-sandbox/kubeconfig");
    expect(kubeconfig).toBeDefined();
    // The cluster's endpoint and CA, and the plugin for people: the runtime never runs it.
    expect(kubeconfig).toMatch(/"command":\s*"gke-gcloud-auth-plugin"/);
    expect(script).toContain(
      "chmod 0600 /etc/agent-sandbox/kubeconfig.new && mv /etc/agent-sandbox/kubeconfig.new /etc/agent-sandbox/kubeconfig",
    );
    const config = parseStackConfig(
      (parseYaml(file("/etc/agent-sandbox/stack.yaml")!) as { config: Record<string, unknown> }).config,
      "stack.yaml",
    );
    expect(config.tenants.kubernetes).toEqual({
      runtimeClassName: "gvisor",
      kubeconfigFile: "/etc/agent-sandbox/kubeconfig",
      credentials: "gke",
      homeSize: "10Gi",
    });
    // What the runtime's backups of the cluster's projects run on the host (runtime/kubernetes/backup.ts).
    const install = script.split("\n").find((line) => line.startsWith("apt-get install"))!;
    for (const pkg of startup.KUBERNETES_PACKAGES) expect(install).toContain(` ${pkg}`);
  });

  it("the Kubernetes Engine API is enabled and the subnet carries the pods and services ranges", () => {
    expect(byType(resources, "gcp:projects/service:Service").map((s) => s.inputs.service)).toContain(
      "container.googleapis.com",
    );
    expect(one(resources, "gcp:compute/subnetwork:Subnetwork").inputs.secondaryIpRanges).toEqual([
      { rangeName: "platform-pods", ipCidrRange: "10.20.0.0/16" },
      { rangeName: "platform-services", ipCidrRange: "10.30.0.0/20" },
    ]);
  });

  it("the runtime's access to the cluster: its role, its binding, the namespace policy, on the cluster's own provider", () => {
    const runtimeUser = `project-service-sa@${PROJECT}.iam.gserviceaccount.com`;
    const provider = one(resources, "pulumi:providers:kubernetes");
    const kubeconfig = JSON.parse(provider.inputs.kubeconfig);
    expect(kubeconfig.clusters[0].cluster).toEqual({
      server: "https://198.51.100.7",
      "certificate-authority-data": "Q0EtUEVN",
    });
    // The operator's gcloud credentials at `pulumi up`; the kubeconfig holds no token.
    expect(kubeconfig.users[0].user.exec.command).toBe("gke-gcloud-auth-plugin");
    expect(JSON.stringify(kubeconfig)).not.toMatch(/token/i);
    const kubernetesObjects = resources.filter((r) => r.type.startsWith("kubernetes:"));
    expect(kubernetesObjects.map((r) => r.type).sort()).toEqual([
      "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
      "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding",
      "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
      "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    ]);
    for (const object of kubernetesObjects) expect(object.provider).toMatch(/::sandboxes-cluster::/);
    const rules = one(resources, "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole").inputs.rules;
    expect(rules).toEqual(
      runtimeAccess.RUNTIME_CLUSTER_RULES.map((rule) => ({
        apiGroups: [...rule.apiGroups],
        resources: [...rule.resources],
        verbs: [...rule.verbs],
      })),
    );
    // Nothing a tenant's objects and the runtime's reads and execs do not need.
    const granted = rules.flatMap((rule: { resources: string[] }) => rule.resources);
    for (const never of ["secrets", "nodes", "pods/attach", "pods/portforward", "clusterroles", "*"])
      expect(granted).not.toContain(never);
    // Read only: the sandbox's Pod, and what Pulumi's Kubernetes provider watches to know its objects ready.
    for (const read of ["pods", "endpoints", "replicasets"])
      expect(
        rules.find((rule: { resources: string[] }) => rule.resources.includes(read)).verbs,
        read,
      ).toEqual(["get", "list", "watch"]);
    expect(
      one(resources, "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding").inputs.subjects,
    ).toEqual([{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: runtimeUser }]);
    const policy = one(resources, "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
      .inputs.spec;
    expect(policy.failurePolicy).toBe("Fail");
    expect(policy.matchConditions).toEqual([
      { name: "the-runtime", expression: `request.userInfo.username == "${runtimeUser}"` },
    ]);
    expect(policy.matchConstraints.resourceRules[0].operations).toEqual([
      "CREATE",
      "UPDATE",
      "DELETE",
      "CONNECT",
    ]);
    expect(policy.validations.map((v: { expression: string }) => v.expression)).toEqual([
      runtimeAccess.RUNTIME_NAMESPACE_RULE,
      runtimeAccess.RUNTIME_SERVICE_RULE,
    ]);
    expect(
      one(resources, "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding").inputs
        .spec,
    ).toEqual({ policyName: "agent-sandbox-runtime-namespaces", validationActions: ["Deny"] });
    // GKE lets the account in at all only with container.clusters.get.
    expect(
      resources.filter((r) => r.inputs.member === `serviceAccount:${runtimeUser}`).map((r) => r.inputs.role),
    ).toContain("roles/container.clusterViewer");
  });

  it("the nodes' account gets logging/monitoring and registry pulls only", () => {
    const member = `serviceAccount:agent-sandbox-gke-nodes@${PROJECT}.iam.gserviceaccount.com`;
    const roles = resources.filter((r) => r.inputs.member === member).map((r) => r.inputs.role);
    expect(roles.sort()).toEqual(
      [
        "roles/artifactregistry.reader",
        "roles/logging.logWriter",
        "roles/monitoring.metricWriter",
        "roles/monitoring.viewer",
      ].sort(),
    );
  });
});

describe("gcp platform for microVM sandboxes (issue 19)", () => {
  let resources: Registered[];
  beforeAll(async () => {
    resources = (
      await declare(
        stackConfig({ machineType: "n2-standard-8" }, { "agent-sandbox:tenants": { backend: "microvm" } }),
      )
    ).resources;
  });

  it("the host VM has nested virtualization, on a machine series that has it", () => {
    expect(one(resources, "gcp:compute/instance:Instance").inputs).toMatchObject({
      machineType: "n2-standard-8",
      advancedMachineFeatures: { enableNestedVirtualization: true },
      shieldedInstanceConfig: { enableSecureBoot: true },
    });
  });

  it("its startup script installs QEMU and what the launcher needs, loads KVM, and fetches the guest kernel", () => {
    const script: string = one(resources, "gcp:compute/instance:Instance").inputs.metadataStartupScript;
    const install = script.split("\n").find((line) => line.startsWith("apt-get install"))!;
    for (const pkg of [...startup.HOST_PACKAGES, ...startup.MICROVM_PACKAGES])
      expect(install).toContain(` ${pkg}`);
    expect(script).toContain("modprobe kvm_intel");
    // After the release is unpacked (the script is in it), before the runtime starts (its probe reads the cache).
    const kernel = script.indexOf("bash scripts/microvm-kernel.sh");
    expect(kernel).toBeGreaterThan(script.indexOf("npm run setup"));
    expect(kernel).toBeLessThan(script.indexOf("systemctl restart agent-sandbox-runtime.service"));
    expect(script).toContain("AGENT_SANDBOX_CACHE=/var/cache/agent-sandbox bash scripts/microvm-kernel.sh");
  });

  it("the default host (containers) has neither", async () => {
    const plain = (await declare(stackConfig())).resources;
    const vm = one(plain, "gcp:compute/instance:Instance").inputs;
    expect(vm.advancedMachineFeatures).toBeUndefined();
    expect(vm.metadataStartupScript).not.toContain("qemu-system-x86");
    expect(vm.metadataStartupScript).not.toContain("microvm-kernel.sh");
    expect(vm.metadataStartupScript).not.toMatch(/apt-get install .* sshfs/);
  });

  it("gcp.microvm alone turns it on for a host whose projects ask for microVMs one by one", async () => {
    const vm = one(
      (await declare(stackConfig({ machineType: "c3-standard-4", microvm: true }))).resources,
      "gcp:compute/instance:Instance",
    ).inputs;
    expect(vm.advancedMachineFeatures).toEqual({ enableNestedVirtualization: true });
  });

  it("passes every rule of the policy pack", async () => {
    expect(await policyViolations(resources)).toEqual([]);
  });

  it("a machine type without nested virtualization, or gcp.microvm false under a microVM default, is refused naming the key", () => {
    expect(() => stackConfig({ microvm: true })).toThrow(
      /agent-sandbox:gcp\.machineType: e2-standard-4 cannot enable nested virtualization.*n2-standard-8/,
    );
    expect(() => stackConfig({ machineType: "n2d-standard-8", microvm: true })).toThrow(
      /gcp\.machineType: n2d-standard-8/,
    );
    expect(() =>
      stackConfig(
        { machineType: "n2-standard-8", microvm: false },
        { "agent-sandbox:tenants": { backend: "microvm" } },
      ),
    ).toThrow(/agent-sandbox:gcp\.microvm: must not be false while tenants\.backend is microvm/);
    // The default machine type with the default backend needs none of it.
    expect(() => stackConfig()).not.toThrow();
  });
});

describe("gcp platform refusals", () => {
  it("an image context missing what the Dockerfile copies is refused before anything is planned", () => {
    const context = stagedContext();
    const bare = mkdtempSync(path.join(os.tmpdir(), "bare-context-"));
    writeFileSync(
      path.join(bare, "Dockerfile"),
      "FROM x\nCOPY vendor/node/ /usr/local/\nCOPY --from=y /a /b\n",
    );
    expect(sandboxImage.validateSandboxImageArgs({ context, repositoryPath: "r", baseImage: "b" })).toEqual(
      [],
    );
    expect(
      sandboxImage
        .validateSandboxImageArgs({ context: bare, repositoryPath: "r", baseImage: "b" })
        .join("\n"),
    ).toMatch(/lacks vendor\/node\/ that the Dockerfile copies/);
    expect(() => gcpPlatform(stackConfig({ sandboxImageContext: bare }))).toThrow(/lacks vendor\/node\//);
  });

  it("the image tag changes with the context's content and the base image", () => {
    const context = stagedContext();
    const first = sandboxImage.sandboxImageTag({ context, baseImage: "ubuntu:24.04" });
    expect(sandboxImage.sandboxImageTag({ context, baseImage: "ubuntu:24.04" })).toBe(first);
    expect(sandboxImage.sandboxImageTag({ context, baseImage: "ubuntu:22.04" })).not.toBe(first);
    writeFileSync(path.join(context, "rootfs/etc/hello"), "changed");
    expect(sandboxImage.sandboxImageTag({ context, baseImage: "ubuntu:24.04" })).not.toBe(first);
  });

  it("the network component itself refuses a flow covering Squid's port", () => {
    const args = {
      project: PROJECT,
      region: "europe-west1",
      subnetCidr: "10.10.0.0/24",
      adminSourceRanges: ["198.51.100.0/24"],
      clientSourceRanges: ["0.0.0.0/0"],
      sshPortRange: [3000, 4000] as const,
      squidPort: 3128,
    };
    expect(network.validatePlatformNetworkArgs(args)).toEqual([
      "sandbox-ssh: ports 3000-4000 include 3128 (Squid), which is never opened",
    ]);
    expect(
      network.validatePlatformNetworkArgs({ ...args, sshPortRange: [10000, 11000], squidPort: 443 }),
    ).toEqual(["https: ports 443 include 443 (Squid), which is never opened"]);
  });

  it("a host config directory the systemd units do not use is refused", () => {
    expect(() =>
      startup.renderStartupScript({
        host: { squidPort: 3128, configDir: "/etc/other", dataDir: "/d", logDir: "/l", runDir: "/r" },
        runtimeStackConfig: {},
        frontDoor: FRONT_DOOR,
        release: { bucket: "b-1", object: "releases/x.zip", digest: "x" },
        pulumiVersion: "3.200.0",
        plugins: [],
        postgresImage: "postgres:16-alpine",
        registryHost: "europe-west1-docker.pkg.dev",
        sandboxImage: "i:1",
      }),
    ).toThrow(/host\.configDir must be \/etc\/agent-sandbox/);
  });
});

/** The host directories every rendered script below uses (the defaults of agent-sandbox:host). */
const SCRIPT_HOST = {
  squidPort: 3128,
  configDir: "/etc/agent-sandbox",
  dataDir: "/var/lib/agent-sandbox",
  logDir: "/var/log/agent-sandbox",
  runDir: "/run/agent-sandbox",
};

describe("startup script text", () => {
  it("matches the reviewed snapshot for fixed inputs", () => {
    const script = startup.renderStartupScript({
      host: SCRIPT_HOST,
      runtimeStackConfig: { "agent-sandbox:target": "gcp" },
      frontDoor: FRONT_DOOR,
      release: {
        bucket: BUCKET,
        object: "releases/agent-sandbox-0123456789abcdef.zip",
        digest: "0123456789abcdef",
      },
      pulumiVersion: "3.200.0",
      plugins: [{ name: "gcp", version: "9.37.0" }],
      postgresImage: "postgres:16-alpine",
      registryHost: "europe-west1-docker.pkg.dev",
      sandboxImage: `europe-west1-docker.pkg.dev/${PROJECT}/sandboxes/sandbox:0123456789abcdef`,
    });
    expect(script).toMatchSnapshot();
  });

  it("a failed command names its step, its line and the command, and stops the script", () => {
    const script = startup.renderStartupScript({
      host: SCRIPT_HOST,
      runtimeStackConfig: {},
      frontDoor: FRONT_DOOR,
      release: { bucket: BUCKET, object: "releases/x.zip", digest: "x" },
      pulumiVersion: "3.200.0",
      plugins: [],
      postgresImage: "postgres:16-alpine",
      registryHost: "europe-west1-docker.pkg.dev",
      sandboxImage: "i:1",
    });
    // The script's own prelude (up to its first step), then two steps of which the second fails.
    const prelude = script.slice(0, script.indexOf('step "1.'));
    const result = spawnSync(
      "bash",
      ["-c", `${prelude}step "1. one"\ntrue\nstep "2. two"\ngrep -q never /dev/null\necho after`],
      { encoding: "utf8" },
    );
    expect(result.status).toBe(1);
    expect(result.stdout).toMatch(
      /^agent-sandbox startup: 1\. one \(at 0 s\)\nagent-sandbox startup: 2\. two \(at 0 s\)\n$/,
    );
    expect(result.stderr).toMatch(
      /^agent-sandbox startup: step 2\. two failed \(exit 1\) at line \d+: grep -q never \/dev\/null\n$/,
    );
  });
});
