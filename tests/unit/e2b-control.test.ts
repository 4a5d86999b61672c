// The E2B control plane's listing, pages, states, timeout job and create deadline on PGlite, driven by E2B's
// own SDK over loopback, with no sandbox behind the projects (no reconciler runs here): the sandboxes are
// recorded as a create records them (POST /projects, then the e2b_sandboxes row), which is what these parts
// read. The SDK against real sandboxes is tests/integration/e2b-control-plane.test.ts.
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { NotFoundError, Sandbox, type SandboxOpts } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { e2bTemplates } from "../../runtime/api/e2b/control.js";
import { e2bTimeoutJob } from "../../runtime/jobs/e2b-timeout.js";
import { recordE2bSandbox, setE2bTimeout } from "../../runtime/store/e2b-sandboxes.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { RuntimeConfig, StackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testDatabase } from "../helpers/postgres.js";

let h: ApiHarness<"alice" | "bob">;
let dataDir: string;
let base: string;
const keys: Record<"alice" | "bob", string> = { alice: "", bob: "" };
const as = (who: "alice" | "bob"): SandboxOpts => ({
  apiKey: keys[who],
  apiUrl: `${base}/e2b`,
  sandboxUrl: `${base}/e2b`,
});

/** A sandbox recorded as a create records it: a project (POST /projects), then its e2b_sandboxes row. */
async function recordedSandbox(
  who: "alice" | "bob",
  metadata: Record<string, string>,
  onTimeout: "kill" | "pause" = "kill",
): Promise<string> {
  const made = await h.as(who, "POST", "/projects", { name: "e2b recorded" });
  expect(made.statusCode, made.body).toBe(202);
  const projectId = (made.json() as { project_id: string }).project_id;
  await recordE2bSandbox(h.db, {
    projectId,
    template: "base",
    metadata,
    envVars: {},
    timeoutSeconds: 300,
    onTimeout,
    autoResume: false,
  });
  return projectId;
}

const listed = async (
  who: "alice" | "bob",
  query?: NonNullable<Parameters<typeof Sandbox.list>[0]>["query"],
) => (await Sandbox.list({ ...as(who), query }).nextItems()).map((s) => s.sandboxId);

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "e2b-control-"));
  const config = StackConfig.parse({
    target: "local",
    host: { dataDir },
    tenants: { subnetPool: "10.99.0.0/16" },
  });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: dataDir }),
    config,
    users: ["alice", "bob"],
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        projectQuota: 20,
        rateLimits: { register: { burst: 10, perHour: 20 }, createProject: { burst: 50, perHour: 100 } },
        e2b: { defaultTimeoutSeconds: 300, maxTimeoutSeconds: 3600, createWaitSeconds: 1 },
      },
      // Nothing here asks the host which networks it uses: no sandbox is made.
      projects: { defaults: { ...tenantDefaults(config), hostUsage: undefined } },
    },
  });
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  for (const who of ["alice", "bob"] as const)
    keys[who] = ((await h.as(who, "POST", "/auth/api-keys", { name: "sdk" })).json() as { key: string }).key;
}, 120_000);

afterAll(async () => {
  await h?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the E2B control plane's listing", () => {
  let ids: string[];

  it("pages the owner's sandboxes by the SDK's limit and x-next-token, oldest first, filtered by metadata", async () => {
    ids = [];
    for (let i = 0; i < 5; i++) ids.push(await recordedSandbox("alice", { batch: "pages", i: String(i) }));
    const bobs = await recordedSandbox("bob", { batch: "pages", i: "0" });
    const pages = Sandbox.list({ ...as("alice"), query: { metadata: { batch: "pages" } }, limit: 2 });
    const seen: string[][] = [];
    while (pages.hasNext) seen.push((await pages.nextItems()).map((s) => s.sandboxId));
    expect(seen).toEqual([ids.slice(0, 2), ids.slice(2, 4), ids.slice(4)]);
    expect(await listed("alice", { metadata: { batch: "pages", i: "3" } })).toEqual([ids[3]]);
    expect(await listed("bob")).toEqual([bobs]);
    // A project that is not an E2B sandbox is neither listed nor found.
    const plain = (await h.as("alice", "POST", "/projects", { name: "plain" })).json() as {
      project_id: string;
    };
    expect(await listed("alice")).toEqual(ids);
    await expect(Sandbox.getInfo(plain.project_id, as("alice"))).rejects.toThrow(NotFoundError);
  });

  it("shows a stopped sandbox as paused, filters by state, and refuses to connect while its stop is under way", async () => {
    await requestOperation(h.db, ids[1]!, "stop");
    expect(await listed("alice", { state: ["paused"] })).toEqual([ids[1]]);
    expect(await listed("alice", { state: ["running"] })).toEqual(ids.filter((id) => id !== ids[1]));
    expect((await Sandbox.getInfo(ids[1]!, as("alice"))).state).toBe("paused");
    await expect(Sandbox.connect(ids[1]!, as("alice"))).rejects.toThrow(
      /409: sandbox .* is not running and another operation of its project is under way/,
    );
  });

  it("refuses a query it cannot read, naming the parameter", async () => {
    const get = async (query: string) =>
      (await fetch(`${base}/e2b/v2/sandboxes?${query}`, { headers: { "x-api-key": keys.alice } })).json();
    expect(await get("nextToken=nope")).toEqual({
      code: 400,
      message: expect.stringMatching(/nextToken: is not a token this API handed out/),
    });
    expect(await get("state=running,asleep")).toEqual({
      code: 400,
      message: expect.stringMatching(/state\.1: must be running or paused/),
    });
    expect(await get(`metadata=${encodeURIComponent("k=%E0%A4%A")}`)).toEqual({
      code: 400,
      message: expect.stringMatching(/metadata: must be key=value pairs/),
    });
    expect(await get("limit=0")).toEqual({
      code: 400,
      message: expect.stringMatching(/limit: must be a whole/),
    });
  });
});

describe("the timeout job", () => {
  it("deletes a sandbox past its timeout, stops one asked to auto-pause, each once", async () => {
    const kill = await recordedSandbox("alice", { batch: "timeout" });
    const pause = await recordedSandbox("alice", { batch: "timeout" }, "pause");
    const later = await recordedSandbox("alice", { batch: "timeout" });
    for (const id of [kill, pause]) await setE2bTimeout(h.db, h.users.alice.id, id, 0);
    const job = e2bTimeoutJob(h.db, 1000);
    expect(await job.run()).toEqual({ killed: [kill], paused: [pause] });
    expect(await job.run()).toEqual({ killed: [], paused: [] });
    const { rows } = await h.db.query<{ project_id: string; kind: string }>(
      "select project_id, kind from operations where project_id = any($1) and kind <> 'create' order by seq",
      [[kill, pause, later]],
    );
    expect(rows).toEqual([
      { project_id: kill, kind: "delete" },
      { project_id: pause, kind: "stop" },
    ]);
    expect(await listed("alice", { metadata: { batch: "timeout" } })).toEqual([pause, later]);
    expect(await listed("alice", { metadata: { batch: "timeout" }, state: ["paused"] })).toEqual([pause]);
  });
});

describe("a create", () => {
  it("that is not running within runtime.e2b.createWaitSeconds is 504, and its project is deleted again", async () => {
    const before = await listed("alice");
    await expect(Sandbox.create({ ...as("alice"), metadata: { batch: "late" } })).rejects.toThrow(
      /504: sandbox .* was not running within 1 s \(agent-sandbox:runtime\.e2b\.createWaitSeconds\); it is being deleted/,
    );
    expect(await listed("alice")).toEqual(before);
    const { rows } = await h.db.query<{ kind: string }>(
      `select o.kind from operations o join e2b_sandboxes e on e.project_id = o.project_id
        where e.metadata = '{"batch": "late"}' order by o.seq`,
    );
    expect(rows.map((r) => r.kind)).toEqual(["create", "delete"]);
  });

  it("takes E2B's default template and the platform's image by name", () => {
    expect([...e2bTemplates({ image: "agent-sandbox/sandbox:latest" })]).toEqual([
      ["base", "agent-sandbox/sandbox:latest"],
      ["agent-sandbox/sandbox:latest", "agent-sandbox/sandbox:latest"],
      ["agent-sandbox/sandbox", "agent-sandbox/sandbox:latest"],
    ]);
  });
});
