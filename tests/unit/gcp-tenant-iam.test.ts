// Issue 21: the tenant's IAM conditions, evaluated. The emulator the integration tests use enforces no IAM,
// so here the condition text the tenant component renders (under Pulumi mocks, as the engine would send it)
// is parsed and evaluated by a small evaluator of the CEL subset IAM conditions use (string literals,
// `resource.name`/`resource.type`, `api.getAttribute(...)`, `.startsWith`, `==`, `&&`, `||`, parentheses)
// against the requests GCS would check: tenant `proj-1` is never granted `proj-10/…`, property by
// property, for every binding. And: no key of any service account is declared by the tenant program.
import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";

interface Registered {
  type: string;
  inputs: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
}
const registered: Registered[] = [];

/** What GCS evaluates a condition against. */
interface IamRequest {
  readonly resourceName: string;
  readonly resourceType: string;
  /** `storage.googleapis.com/objectListPrefix` of a list request. */
  readonly listPrefix?: string;
}

type Value = string | boolean;

/** Parses and evaluates one IAM condition expression; throws on anything outside the subset. */
export function evaluateCondition(expression: string, request: IamRequest): boolean {
  const tokens = expression.match(/"(?:[^"\\]|\\.)*"|&&|\|\||==|[().,]|[A-Za-z_][A-Za-z0-9_]*|\S/g) ?? [];
  let at = 0;
  const peek = () => tokens[at];
  const take = (expected?: string) => {
    const token = tokens[at++];
    if (token === undefined || (expected !== undefined && token !== expected))
      throw new Error(`expected ${expected ?? "a token"} at ${at - 1} in ${expression}, got ${token}`);
    return token;
  };
  const attributes: Record<string, Value> = {
    "storage.googleapis.com/objectListPrefix": request.listPrefix ?? "",
  };
  const primary = (): Value => {
    const token = take();
    let value: Value;
    if (token === "(") {
      value = or();
      take(")");
    } else if (token.startsWith('"')) {
      value = JSON.parse(token) as string;
    } else if (token === "resource") {
      take(".");
      const field = take();
      if (field === "name") value = request.resourceName;
      else if (field === "type") value = request.resourceType;
      else throw new Error(`unknown resource.${field}`);
    } else if (token === "api") {
      take(".");
      take("getAttribute");
      take("(");
      const name = JSON.parse(take()) as string;
      take(",");
      const fallback = JSON.parse(take()) as string;
      take(")");
      value = attributes[name] ?? fallback;
    } else throw new Error(`unexpected ${token} in ${expression}`);
    while (peek() === ".") {
      take(".");
      const method = take();
      if (method !== "startsWith") throw new Error(`unsupported method ${method}`);
      take("(");
      const argument = JSON.parse(take()) as string;
      take(")");
      if (typeof value !== "string") throw new Error("startsWith on a non-string");
      value = value.startsWith(argument);
    }
    return value;
  };
  const equality = (): Value => {
    const left = primary();
    if (peek() !== "==") return left;
    take("==");
    return left === primary();
  };
  const and = (): Value => {
    let value = equality();
    while (peek() === "&&") {
      take("&&");
      const right = equality();
      value = value === true && right === true;
    }
    return value;
  };
  const or = (): Value => {
    let value = and();
    while (peek() === "||") {
      take("||");
      const right = and();
      value = value === true || right === true;
    }
    return value;
  };
  const result = or();
  if (at !== tokens.length) throw new Error(`trailing ${tokens.slice(at).join(" ")} in ${expression}`);
  if (typeof result !== "boolean") throw new Error(`${expression} is not a condition`);
  return result;
}

const BUCKET = "sandbox-bucket";
const object = (name: string): IamRequest => ({
  resourceName: `projects/_/buckets/${BUCKET}/objects/${name}`,
  resourceType: "storage.googleapis.com/Object",
});
const listing = (prefix: string): IamRequest => ({
  resourceName: `projects/_/buckets/${BUCKET}`,
  resourceType: "storage.googleapis.com/Bucket",
  listPrefix: prefix,
});

let Tenant: typeof import("../../components/tenant/tenant.js").Tenant;
let TenantSpec: typeof import("../../components/tenant/spec.js").TenantSpec;

beforeAll(async () => {
  await pulumi.runtime.setMocks(
    {
      newResource(args) {
        registered.push({ type: args.type, inputs: args.inputs });
        const outputs =
          args.type === "gcp:serviceaccount/account:Account"
            ? {
                email: `${args.inputs.accountId}@gcp-project.iam.gserviceaccount.com`,
                name: `projects/gcp-project/serviceAccounts/${args.inputs.accountId}`,
              }
            : args.type === "sandbox:crypto:SshKeyPair"
              ? { publicKey: "ssh-ed25519 AAAAmock", privateKey: "mock" }
              : {};
        return { id: `${args.name}-id`, state: { ...args.inputs, ...outputs } };
      },
      call(args) {
        throw new Error(`unexpected call to ${args.token}`);
      },
    },
    "agent-sandbox-tenant",
    "tenant-iam",
    false,
  );
  ({ Tenant } = await import("../../components/tenant/tenant.js"));
  ({ TenantSpec } = await import("../../components/tenant/spec.js"));
});

/** The bucket bindings a gcp-mode tenant declares, as the engine receives them. */
async function tenantBindings(projectId: string, subnet: string): Promise<Registered[]> {
  registered.length = 0;
  const tenant = new Tenant(`t-${projectId}`, {
    ...TenantSpec.parse({
      projectId,
      ownerId: "u",
      mode: "gcp",
      image: "europe-docker.pkg.dev/x/sandboxes/sandbox:abc",
      subnet,
      sshHostPort: 10003,
      host: {
        squidPort: 3128,
        squidConfigFile: "/etc/squid.conf",
        squidFragmentsDir: "/etc/squid/tenants",
        backupRoot: "/b",
        secretsRoot: "/s",
      },
      gcp: { project: "gcp-project", bucket: BUCKET },
    }),
    secrets: [],
  });
  await new Promise<void>((resolve) => pulumi.all([tenant.urn, tenant.containerName]).apply(() => resolve()));
  await new Promise((resolve) => setTimeout(resolve, 50));
  return [...registered];
}

describe("the tenant's IAM conditions, evaluated", () => {
  let bindings: { role: string; expression: string }[];
  let resources: Registered[];
  beforeAll(async () => {
    resources = await tenantBindings("proj-1", "10.100.3.0/24");
    bindings = resources
      .filter((r) => r.type === "gcp:storage/bucketIAMMember:BucketIAMMember")
      .map((r) => ({ role: r.inputs.role, expression: r.inputs.condition.expression }));
    expect(bindings).toHaveLength(3);
  });
  const granted = (request: IamRequest) => bindings.filter((b) => evaluateCondition(b.expression, request));

  it("the evaluator is not vacuous: it refuses text outside the subset and evaluates each operator", () => {
    expect(() => evaluateCondition('resource.name.endsWith("x")', object("a"))).toThrow(/unsupported method/);
    expect(() => evaluateCondition('resource.name == "a" extra', object("a"))).toThrow(/trailing|unexpected/);
    expect(evaluateCondition('"a" == "a" && ("b" == "c" || "d" == "d")', object("a"))).toBe(true);
    expect(evaluateCondition('"a" == "a" && "b" == "c"', object("a"))).toBe(false);
  });

  it.each([
    "projects/proj-1/workspace/a.txt",
    "projects/proj-1/workspace/deep/dir/b",
    "projects/proj-1/snapshots/x",
  ])("proj-1 may read and write its own object %s", (name) => {
    expect(granted(object(name)).map((b) => b.role)).toEqual(["roles/storage.objectAdmin"]);
  });

  it.each([
    "projects/proj-10/workspace/a.txt",
    "projects/proj-1x/workspace/a.txt",
    "projects/proj-1",
    "projects/proj-2/workspace/a.txt",
    "projects/proj/workspace/a.txt",
    "state/.pulumi/stacks/agent-sandbox-tenant/tenant-proj-1.json",
    "releases/runtime.tgz",
    "shared2/x",
  ])("proj-1 is granted nothing on %s", (name) => {
    expect(granted(object(name))).toEqual([]);
  });

  it("shared/ is read-only for it", () => {
    expect(granted(object("shared/tools.tar")).map((b) => b.role)).toEqual(["roles/storage.objectViewer"]);
  });

  it.each(["projects/proj-1/", "projects/proj-1/workspace/", "shared/"])(
    "it may list with prefix %s",
    (prefix) => {
      expect(granted(listing(prefix)).map((b) => b.role)).toEqual(["roles/storage.objectViewer"]);
    },
  );

  it.each(["projects/proj-10/", "projects/proj-1", "projects/", "", "state/", "projects/proj-10/workspace/"])(
    "it may not list with prefix %j",
    (prefix) => {
      expect(granted(listing(prefix))).toEqual([]);
    },
  );

  it("every property holds for a family of ids where one extends another", async () => {
    for (const [own, other] of [
      ["p1", "p10"],
      ["a-b", "a-bc"],
      ["x9", "x99"],
    ] as const) {
      const declared = (await tenantBindings(own, "10.100.5.0/24"))
        .filter((r) => r.type === "gcp:storage/bucketIAMMember:BucketIAMMember")
        .map((r) => r.inputs.condition.expression as string);
      const anyGrant = (request: IamRequest) => declared.some((e) => evaluateCondition(e, request));
      expect(anyGrant(object(`projects/${own}/workspace/f`)), own).toBe(true);
      expect(anyGrant(object(`projects/${other}/workspace/f`)), `${own} on ${other}`).toBe(false);
      expect(anyGrant(listing(`projects/${other}/`)), `${own} lists ${other}`).toBe(false);
    }
  });

  it("no key of any account: impersonation (token creator for the Project Service account) is the only way in", () => {
    expect(resources.filter((r) => /serviceaccount\/key:Key|hmacKey:HmacKey/.test(r.type))).toEqual([]);
    const creators = resources.filter((r) => r.type === "gcp:serviceaccount/iAMMember:IAMMember");
    expect(creators.map((r) => [r.inputs.role, r.inputs.member])).toEqual([
      [
        "roles/iam.serviceAccountTokenCreator",
        "serviceAccount:project-service-sa@gcp-project.iam.gserviceaccount.com",
      ],
    ]);
  });
});
