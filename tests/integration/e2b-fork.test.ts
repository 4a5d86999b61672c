// E2B's `Sandbox.fork` (the `e2b` 2.51.0 SDK, unchanged) against a runtime listening on loopback, with the
// real reconciler and engine: two forks of a running sandbox, each an E2B sandbox and a project of its own
// with the home as it was at the fork, none of the source's later writes, and an envd token of its own that
// the others' do not open; another user's sandbox and a count out of range refused as the SDK expects.
import type { AddressInfo } from "node:net";
import { NotFoundError, Sandbox, SandboxError, type SandboxOpts } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENVD_VERSION } from "../../runtime/api/e2b/access.js";
import { RuntimeConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let base: string;
const keys: Record<"alice" | "bob", string> = { alice: "", bob: "" };

const as = (who: "alice" | "bob"): SandboxOpts => ({
  apiKey: keys[who],
  apiUrl: `${base}/e2b`,
  sandboxUrl: `${base}/e2b`,
  requestTimeoutMs: 300_000,
});
const tokenOf = (sandbox: Sandbox) => (sandbox as unknown as { envdAccessToken?: string }).envdAccessToken;
/** An SDK sandbox object for `sandboxId` that presents `accessToken` to envd. */
const withToken = (sandboxId: string, accessToken: string | undefined) =>
  new (Sandbox as unknown as new (opts: object) => Sandbox)({
    sandboxId,
    envdAccessToken: accessToken,
    envdVersion: ENVD_VERSION,
    sandboxUrl: `${base}/e2b`,
    apiUrl: `${base}/e2b`,
    apiKey: keys.alice,
    debug: false,
    requestTimeoutMs: 30_000,
  });

beforeAll(async () => {
  platform = await testPlatform({ subnetPool: "10.214.0.0/22", sshPortRange: [29640, 29650] });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        e2b: { defaultTimeoutSeconds: 600, maxTimeoutSeconds: 3600, createWaitSeconds: 300 },
      },
    },
  });
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  for (const who of ["alice", "bob"] as const) {
    const made = await h.as(who, "POST", "/auth/api-keys", { name: "e2b sdk" });
    expect(made.statusCode, made.body).toBe(201);
    keys[who] = (made.json() as { key: string }).key;
  }
}, 600_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 900_000);

describe("E2B's Sandbox.fork", () => {
  let source: Sandbox;
  let forks: Sandbox[];

  it("forks a running sandbox twice: each runs with the home as it was, none of the source's later writes", async () => {
    source = await Sandbox.create({ ...as("alice"), metadata: { suite: "fork" }, timeoutMs: 600_000 });
    await source.files.write("/home/agent/note.txt", "at the fork\n");
    const started = Date.now();
    const results = await source.fork({ count: 2, timeoutMs: 900_000 });
    console.log(`E2B fork ×2 to two running sandboxes: ${Date.now() - started} ms`);
    await source.files.write("/home/agent/note.txt", "after the fork\n");
    expect(results.map((r) => (r instanceof Error ? r.message : "sandbox"))).toEqual(["sandbox", "sandbox"]);
    forks = results as Sandbox[];
    for (const fork of forks) {
      expect(fork.sandboxId).not.toBe(source.sandboxId);
      expect(await fork.files.read("/home/agent/note.txt")).toBe("at the fork\n");
      expect((await fork.commands.run("id -un")).stdout.trim()).toBe("agent");
      // An E2B sandbox of its own, with the source's metadata, and a project of alice's forked from it.
      const info = await Sandbox.getInfo(fork.sandboxId, as("alice"));
      expect(info.metadata).toEqual({ suite: "fork" });
      const view = (await h.as("alice", "GET", `/projects/${fork.sandboxId}`)).json();
      expect(view).toMatchObject({ status: "running", forked_from: { project_id: source.sandboxId } });
    }
    expect(await source.files.read("/home/agent/note.txt")).toBe("after the fork\n");
  }, 1_200_000);

  it("gives each fork an envd token of its own: another's token does not open it", async () => {
    const tokens = [source, ...forks].map(tokenOf);
    expect(new Set(tokens).size).toBe(3);
    for (const token of tokens) expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await expect(
      withToken(forks[0]!.sandboxId, tokenOf(source)).files.read("/home/agent/note.txt"),
    ).rejects.toThrow();
    await expect(withToken(forks[0]!.sandboxId, tokenOf(forks[1]!)).commands.run("true")).rejects.toThrow();
    expect(await withToken(forks[0]!.sandboxId, tokenOf(forks[0]!)).files.read("/home/agent/note.txt")).toBe(
      "at the fork\n",
    );
  });

  it("refuses another user's sandbox (NotFound) and a count out of range (400), making nothing", async () => {
    const before = (await h.as("alice", "GET", "/projects")).json().projects.length;
    await expect(Sandbox.fork(source.sandboxId, { ...as("bob"), count: 1 })).rejects.toThrow(NotFoundError);
    // The SDK's own class for a 400 (it maps no status but 401, 404, 429 and 503 to one of its own).
    const refused = await Sandbox.fork(source.sandboxId, { ...as("alice"), count: 11 }).catch(
      (e: Error) => e,
    );
    expect(refused).toBeInstanceOf(SandboxError);
    expect((refused as SandboxError).message).toMatch(/^400: invalid body: count: must be at most 10 forks/);
    expect((await h.as("alice", "GET", "/projects")).json().projects.length).toBe(before);
    expect((await h.as("bob", "GET", "/projects")).json().projects).toEqual([]);
  });
});
