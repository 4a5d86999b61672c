// The policy pack's rules against compliant and non-compliant resources, called as the engine calls them:
// validateResource(args, reportViolation) with a collector for the violations.
import type { ResourceValidationArgs } from "@pulumi/policy";
import { describe, expect, it } from "vitest";
import { platformPolicies } from "../../policy/rules.js";

/** The violations every policy of the pack reports for one resource, as `<policy>: <message>`. */
async function violations(type: string, props: Record<string, unknown>): Promise<string[]> {
  const found: string[] = [];
  for (const policy of platformPolicies) {
    const validations = [policy.validateResource ?? []].flat();
    for (const validate of validations) {
      const args = { type, props, urn: `urn:pulumi:gcp::agent-sandbox::${type}::r`, name: "r" };
      await validate(args as unknown as ResourceValidationArgs, (message) =>
        found.push(`${policy.name}: ${message}`),
      );
    }
  }
  return found;
}

const FIREWALL = "gcp:compute/firewall:Firewall";
const BUCKET = "gcp:storage/bucket:Bucket";
const REPOSITORY = "gcp:artifactregistry/repository:Repository";

const compliantBucket = {
  name: "b",
  location: "EU",
  uniformBucketLevelAccess: true,
  publicAccessPrevention: "enforced",
  lifecycleRules: [{ action: { type: "Delete" }, condition: { daysSinceNoncurrentTime: 30 } }],
};

const compliantRepository = {
  repositoryId: "sandboxes",
  format: "DOCKER",
  cleanupPolicyDryRun: false,
  cleanupPolicies: [
    { id: "keep", action: "KEEP", mostRecentVersions: { keepCount: 5 } },
    { id: "delete", action: "DELETE", condition: { tagState: "ANY" } },
  ],
};

describe("policy pack", () => {
  it("is six mandatory policies", () => {
    expect(platformPolicies.map((p) => [p.name, p.enforcementLevel])).toEqual([
      ["squid-port-never-open", "mandatory"],
      ["bucket-never-public", "mandatory"],
      ["bucket-has-lifecycle", "mandatory"],
      ["no-primitive-roles", "mandatory"],
      ["registry-has-cleanup", "mandatory"],
      ["tenant-workload-sandboxed", "mandatory"],
    ]);
  });

  describe("squid-port-never-open", () => {
    it.each([
      [[{ protocol: "tcp", ports: ["22"] }]],
      [[{ protocol: "tcp", ports: ["8000", "9000", "10000-11000"] }]],
      [[{ protocol: "udp", ports: ["3128"] }]],
      [[{ protocol: "icmp" }]],
    ])("passes a rule allowing %j", async (allows) => {
      expect(
        await violations(FIREWALL, { direction: "INGRESS", allows, sourceRanges: ["0.0.0.0/0"] }),
      ).toEqual([]);
    });

    it.each([
      [[{ protocol: "tcp", ports: ["3128"] }], "tcp 3128"],
      [[{ protocol: "tcp", ports: ["3000-4000"] }], "tcp 3000-4000"],
      [[{ protocol: "tcp" }], "tcp all ports"],
      [[{ protocol: "all" }], "all all ports"],
      [[{ protocol: "TCP", ports: ["22", "3128"] }], "TCP 22,3128"],
    ])("refuses a rule allowing %j", async (allows, shown) => {
      // No direction given means INGRESS in GCP.
      expect(await violations(FIREWALL, { allows, sourceRanges: ["0.0.0.0/0"] })).toEqual([
        `squid-port-never-open: firewall rule allows ${shown}, which opens Squid's port 3128`,
      ]);
    });

    it("a deny rule or an egress rule is not an opening", async () => {
      expect(
        await violations(FIREWALL, { denies: [{ protocol: "all" }], sourceRanges: ["0.0.0.0/0"] }),
      ).toEqual([]);
      expect(
        await violations(FIREWALL, { direction: "EGRESS", allows: [{ protocol: "tcp", ports: ["3128"] }] }),
      ).toEqual([]);
    });
  });

  describe("buckets", () => {
    it("passes the platform's bucket", async () => {
      expect(await violations(BUCKET, compliantBucket)).toEqual([]);
    });

    it("refuses a bucket without enforced public access prevention or uniform access", async () => {
      expect(
        await violations(BUCKET, {
          ...compliantBucket,
          publicAccessPrevention: "inherited",
          uniformBucketLevelAccess: false,
        }),
      ).toEqual([
        "bucket-never-public: bucket publicAccessPrevention is 'inherited', not 'enforced'",
        "bucket-never-public: bucket has no uniform bucket-level access (object ACLs could make objects public)",
      ]);
      expect(await violations(BUCKET, { ...compliantBucket, publicAccessPrevention: undefined })).toEqual([
        "bucket-never-public: bucket publicAccessPrevention is 'undefined', not 'enforced'",
      ]);
    });

    it("refuses a bucket without lifecycle rules, or whose rules never delete", async () => {
      expect(await violations(BUCKET, { ...compliantBucket, lifecycleRules: undefined })).toEqual([
        "bucket-has-lifecycle: bucket has no lifecycle rules",
      ]);
      expect(
        await violations(BUCKET, {
          ...compliantBucket,
          lifecycleRules: [
            { action: { type: "SetStorageClass", storageClass: "COLDLINE" }, condition: { age: 30 } },
          ],
        }),
      ).toEqual([
        "bucket-has-lifecycle: bucket lifecycle rules never delete anything (deleted projects' data would be kept forever)",
      ]);
    });

    it.each([
      [
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        { bucket: "b", role: "roles/storage.objectViewer", member: "allUsers" },
      ],
      [
        "gcp:storage/bucketIAMBinding:BucketIAMBinding",
        {
          bucket: "b",
          role: "roles/storage.objectViewer",
          members: ["user:a@example.com", "allAuthenticatedUsers"],
        },
      ],
      [
        "gcp:storage/bucketIAMPolicy:BucketIAMPolicy",
        {
          bucket: "b",
          policyData: JSON.stringify({
            bindings: [{ role: "roles/storage.objectViewer", members: ["allUsers"] }],
          }),
        },
      ],
      [
        "gcp:storage/bucketAccessControl:BucketAccessControl",
        { bucket: "b", role: "READER", entity: "allUsers" },
      ],
    ])("refuses a public grant: %s", async (type, props) => {
      const found = await violations(type, props);
      expect(found).toHaveLength(1);
      expect(found[0]).toMatch(
        /^bucket-never-public: storage grant to all(Authenticated)?Users makes the bucket public$/,
      );
    });

    it("passes a grant to a service account with a condition", async () => {
      expect(
        await violations("gcp:storage/bucketIAMMember:BucketIAMMember", {
          bucket: "b",
          role: "roles/storage.objectAdmin",
          member: "serviceAccount:sa@p.iam.gserviceaccount.com",
          condition: {
            title: "t",
            expression: 'resource.name.startsWith("projects/_/buckets/b/objects/state/")',
          },
        }),
      ).toEqual([]);
    });
  });

  describe("no-primitive-roles", () => {
    it.each([
      [
        "gcp:projects/iAMMember:IAMMember",
        { project: "p", role: "roles/owner", member: "user:a@example.com" },
      ],
      [
        "gcp:projects/iAMBinding:IAMBinding",
        { project: "p", role: "roles/editor", members: ["group:g@example.com"] },
      ],
      [
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        { bucket: "b", role: "roles/viewer", member: "serviceAccount:s" },
      ],
      [
        "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
        { repository: "r", role: "roles/editor", member: "serviceAccount:s" },
      ],
      [
        "gcp:projects/iAMPolicy:IAMPolicy",
        {
          project: "p",
          policyData: JSON.stringify({
            bindings: [{ role: "roles/owner", members: ["user:a@example.com"] }],
          }),
        },
      ],
    ])("refuses %s", async (type, props) => {
      const found = await violations(type, props);
      expect(found).toHaveLength(1);
      expect(found[0]).toMatch(
        /^no-primitive-roles: primitive role roles\/(owner|editor|viewer) granted to /,
      );
    });

    it("passes predefined roles, and roles whose names merely contain a primitive one", async () => {
      for (const role of [
        "roles/iam.serviceAccountAdmin",
        "roles/storage.objectViewer",
        "roles/artifactregistry.reader",
      ])
        expect(
          await violations("gcp:projects/iAMMember:IAMMember", {
            project: "p",
            role,
            member: "serviceAccount:s",
          }),
        ).toEqual([]);
    });
  });

  describe("tenant-workload-sandboxed", () => {
    const STATEFUL_SET = "kubernetes:apps/v1:StatefulSet";
    const container = {
      name: "sandbox",
      securityContext: {
        allowPrivilegeEscalation: false,
        privileged: false,
        capabilities: { drop: ["ALL"] },
      },
    };
    const workload = (pod: Record<string, unknown> = {}, labels = { "dev.agent-sandbox.tenant": "p1" }) => ({
      metadata: { name: "sandbox", labels },
      spec: {
        replicas: 1,
        template: {
          spec: {
            runtimeClassName: "gvisor",
            automountServiceAccountToken: false,
            securityContext: { runAsNonRoot: true, runAsUser: 1000 },
            containers: [container],
            ...pod,
          },
        },
      },
    });

    it("passes the tenant program's sandbox, and leaves a workload that is no tenant's alone", async () => {
      expect(await violations(STATEFUL_SET, workload())).toEqual([]);
      expect(await violations(STATEFUL_SET, workload({ runtimeClassName: undefined }, {} as never))).toEqual(
        [],
      );
    });

    it("refuses a tenant's workload without a sandboxed RuntimeClass, naming it", async () => {
      expect(await violations(STATEFUL_SET, workload({ runtimeClassName: undefined }))).toEqual([
        "tenant-workload-sandboxed: a tenant's workload runs under a sandboxed RuntimeClass (gvisor on GKE Sandbox); runtimeClassName is missing",
      ]);
      expect(await violations(STATEFUL_SET, workload({ runtimeClassName: "runc" }))).toEqual([
        'tenant-workload-sandboxed: a tenant\'s workload runs under a sandboxed RuntimeClass (gvisor on GKE Sandbox); runtimeClassName is "runc"',
      ]);
      const pod = {
        metadata: workload().metadata,
        spec: { ...workload().spec.template.spec, runtimeClassName: "" },
      };
      expect(await violations("kubernetes:core/v1:Pod", pod)).toHaveLength(1);
    });

    it("refuses the node's namespaces, a token, root, privilege, escalation and added or kept capabilities", async () => {
      const bad = workload({
        hostNetwork: true,
        hostPID: true,
        automountServiceAccountToken: true,
        securityContext: {},
        initContainers: [
          { name: "init", securityContext: { privileged: true, capabilities: { add: ["NET_ADMIN"] } } },
        ],
      });
      expect(await violations(STATEFUL_SET, bad)).toEqual([
        "tenant-workload-sandboxed: a tenant's workload does not share the node's namespaces: hostNetwork is true",
        "tenant-workload-sandboxed: a tenant's workload does not share the node's namespaces: hostPID is true",
        "tenant-workload-sandboxed: a tenant's workload gets no service-account token: automountServiceAccountToken must be false",
        "tenant-workload-sandboxed: container init is privileged",
        "tenant-workload-sandboxed: container init: allowPrivilegeEscalation must be false",
        "tenant-workload-sandboxed: container init adds capabilities NET_ADMIN",
        "tenant-workload-sandboxed: container init must drop ALL capabilities",
        "tenant-workload-sandboxed: container init may run as root: runAsNonRoot",
        "tenant-workload-sandboxed: container sandbox may run as root: runAsNonRoot",
      ]);
    });
  });

  describe("registry-has-cleanup", () => {
    it("passes a keep-5/delete-the-rest repository", async () => {
      expect(await violations(REPOSITORY, compliantRepository)).toEqual([]);
    });

    it("refuses a repository without cleanup, with cleanup in dry run, or with no KEEP/DELETE pair", async () => {
      expect(await violations(REPOSITORY, { ...compliantRepository, cleanupPolicies: [] })).toEqual([
        "registry-has-cleanup: repository has no cleanup policy",
      ]);
      expect(await violations(REPOSITORY, { ...compliantRepository, cleanupPolicyDryRun: true })).toEqual([
        "registry-has-cleanup: repository cleanup policies are in dry-run mode",
      ]);
      expect(
        await violations(REPOSITORY, {
          ...compliantRepository,
          cleanupPolicies: [{ id: "keep", action: "KEEP", mostRecentVersions: { keepCount: 5 } }],
        }),
      ).toEqual([
        "registry-has-cleanup: repository cleanup must KEEP the most recent versions and DELETE the rest (seed 000 §9 step 9)",
      ]);
    });
  });
});
