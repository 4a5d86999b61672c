// Fork (issue 44): POST /projects/{id}/fork ×10 of a running sandbox with the real reconciler, engine and
// Pulumi engine. Ten projects running, each with the source's home as it was at the fork (and none of what
// the source wrote after), each its own tenant: SSH host and user keys, network, secrets and gateway address
// distinct from the source's and from each other's; the tree listed; bad input refused with nothing made.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { setTenantState } from "../../runtime/store/tenants.js";
import { discardUnrecordedStagedHomes, stagedHomePath, stagingRoots } from "../../runtime/tenants/fork.js";
import { RuntimeConfig } from "../../stacks/config.js";
import { apiHarness, emailOf, PASSWORD, settledOperation, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { sbx } from "../helpers/sbx.js";

const exec = promisify(execFile);
const FORKS = 10;
/** The source, its ten forks and one more: a fork of two beyond it is refused. */
const QUOTA = FORKS + 2;

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let source: { id: string; privateKey: string };
let forked: {
  status: number;
  body: {
    source: { project_id: string; forked_at: string };
    projects: { project_id: string; name: string; status: string; ssh: { private_key: string } }[];
    copy: { frozen_ms: number; total_ms: number; bytes_allocated: number };
  };
  ms: number;
};
/** The sandbox image under a name of this file's, for a source whose image is not the default. */
const FORK_TEST_IMAGE = `agent-sandbox/fork-test:${process.pid}`;
const forkIds = () => forked.body.projects.map((p) => p.project_id);

const inSandbox = async (id: string, user: string, script: string) =>
  (await exec("docker", ["exec", "-u", user, `sbx-${id}`, "sh", "-c", script])).stdout.trim();
const projectsOf = async (who: "alice" | "bob") =>
  (await h.as(who, "GET", "/projects")).json().projects as { project_id: string }[];
const disksRoot = () => path.join(platform.config.host.dataDir, "disks");

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.215.0.0/20",
    sshPortRange: [29600, 29630],
    leaseSeconds: 10,
    backupIntervalSeconds: 3600,
    homeBytes: 1024 * 1024 * 1024,
  });
  h = await apiHarness({
    database: await testDatabase("postgres", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
    server: {
      limits: RuntimeConfig.parse({
        projectQuota: QUOTA,
        rateLimits: { createProject: { burst: 100, perHour: 1000 } },
      }),
    },
  });
  const started = Date.now();
  const created = await h.as("alice", "POST", "/projects", { name: "source" }, { prefer: "respond-async" });
  expect(created.statusCode, created.body).toBe(202);
  source = { id: created.json().project_id, privateKey: created.json().ssh.private_key };
  await h.waitForStatus("alice", source.id, "running");
  console.log(`baseline: one create to running ${Date.now() - started} ms`);
  // Secrets of the source's own: an env secret in its /run/secrets, a model key kept by the gateway.
  for (const [name, value] of [
    ["SOURCE_TOKEN", "source-only-value-1234"],
    ["ANTHROPIC_API_KEY", "sk-ant-source-only"],
  ])
    expect((await h.as("alice", "PUT", `/projects/${source.id}/secrets/${name}`, { value })).statusCode).toBe(
      202,
    );
  await waitFor("the source's secrets in its sandbox", 240_000, async () =>
    (await inSandbox(source.id, "0", "cat /run/secrets/SOURCE_TOKEN 2>/dev/null || true")) ===
    "source-only-value-1234"
      ? true
      : undefined,
  );
  await h.waitForStatus("alice", source.id, "running");
}, 900_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
  await exec("docker", ["image", "rm", FORK_TEST_IMAGE]).catch(() => undefined);
}, 900_000);

describe("fork", () => {
  it(`forks a running sandbox ×${FORKS}: ten projects running, each with the home as it was at the fork`, async () => {
    // A home with something in it: 64 MiB of random bytes, a file, a process writing all along.
    await inSandbox(
      source.id,
      "agent",
      "mkdir -p ~/work && head -c 67108864 /dev/urandom > ~/work/data.bin && echo at-the-fork > ~/work/note.txt && sync",
    );
    const sum = await inSandbox(source.id, "agent", "sha256sum ~/work/data.bin | cut -d' ' -f1");
    const started = Date.now();
    const response = await h.as("alice", "POST", `/projects/${source.id}/fork`, { count: FORKS });
    forked = { status: response.statusCode, body: response.json(), ms: Date.now() - started };
    expect(forked.status, response.body).toBe(202);
    // After the fork answered: the source's later writes.
    await inSandbox(
      source.id,
      "agent",
      "echo after > ~/work/after-fork.txt && echo changed > ~/work/note.txt",
    );

    expect(forked.body.source.project_id).toBe(source.id);
    expect(forked.body.projects).toHaveLength(FORKS);
    expect(forked.body.projects.map((p) => p.name)).toEqual(
      Array.from({ length: FORKS }, (_, i) => `source-fork-${i + 1}`),
    );
    for (const p of forked.body.projects)
      expect(p).toMatchObject({
        status: "creating",
        operation: { kind: "create" },
        forked_from: { project_id: source.id, at: forked.body.source.forked_at },
      });
    await Promise.all(forkIds().map((id) => h.waitForStatus("alice", id, "running", 900_000)));
    const wall = Date.now() - started;
    console.log(
      `fork ×${FORKS} of a ${platform.config.tenants.homeBytes / 2 ** 20} MiB home (64 MiB written in it): ` +
        `answer ${forked.ms} ms (source frozen ${forked.body.copy.frozen_ms} ms, copies ${forked.body.copy.total_ms} ms, ` +
        `${forked.body.copy.bytes_allocated} bytes allocated = ${(forked.body.copy.bytes_allocated / 2 ** 20).toFixed(1)} MiB), ` +
        `all ${FORKS} running ${wall} ms`,
    );
    for (const id of forkIds()) {
      expect(await inSandbox(id, "agent", "sha256sum ~/work/data.bin | cut -d' ' -f1")).toBe(sum);
      expect(await inSandbox(id, "agent", "cat ~/work/note.txt")).toBe("at-the-fork");
      expect(await inSandbox(id, "agent", "test -e ~/work/after-fork.txt && echo there || echo absent")).toBe(
        "absent",
      );
      // The agent owns its home in the copy as in the source.
      expect(await inSandbox(id, "agent", "stat -c %U ~/work/data.bin")).toBe("agent");
    }
    expect(await inSandbox(source.id, "agent", "cat ~/work/note.txt")).toBe("changed");
    // Nothing staged is left beside the forks' images once their creates took the copies over.
    for (const id of forkIds())
      expect((await fs.readdir(path.join(disksRoot(), id))).filter((n) => n.includes(".fork"))).toEqual([]);
  }, 1_800_000);

  it("each fork is its own tenant: keys, host keys, network, secrets and gateway address of its own", async () => {
    const all = [source.id, ...forkIds()];
    const userKeys = [source.privateKey, ...forked.body.projects.map((p) => p.ssh.private_key)];
    expect(new Set(userKeys).size).toBe(all.length);
    const hostKeys = await Promise.all(
      all.map((id) => inSandbox(id, "0", "cat /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f2")),
    );
    expect(new Set(hostKeys).size).toBe(all.length);
    const authorized = await Promise.all(
      all.map((id) => inSandbox(id, "0", "cat /etc/ssh/authorized_keys/agent")),
    );
    expect(new Set(authorized).size).toBe(all.length);
    const networks = await Promise.all(
      all.map(async (id) =>
        (
          await exec("docker", [
            "inspect",
            "-f",
            "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}} {{$v.Gateway}}{{end}}",
            `sbx-${id}`,
          ])
        ).stdout.trim(),
      ),
    );
    expect(new Set(networks).size).toBe(all.length);
    for (const [index, id] of all.entries()) expect(networks[index]).toContain(`sbx-net-${id}`);
    // Each its own gateway address (where its credential gateway listens, for it alone).
    expect(new Set(networks.map((n) => n.split(" ")[2])).size).toBe(all.length);
    // The source's secrets are its own: no fork lists them, has their files or its model key's placeholder.
    for (const id of all) {
      const secrets = (await h.as("alice", "GET", `/projects/${id}/secrets`)).json().secrets;
      const files = await inSandbox(id, "0", "ls /run/secrets; cat /run/secrets/* 2>/dev/null || true");
      if (id === source.id) {
        expect(files).toContain("ANTHROPIC_BASE_URL");
        expect(secrets).toHaveLength(2);
        expect(files).toContain("source-only-value-1234");
        continue;
      }
      expect(secrets).toEqual([]);
      expect(files).not.toContain("source-only-value-1234");
      expect(files).not.toContain("sk-ant-source-only");
      expect(files).not.toContain("ANTHROPIC");
    }
    // SSH into a fork with its own key works; the source's key is refused there.
    const port = (id: string) =>
      h.as("alice", "GET", `/projects/${id}`).then((r) => r.json().ssh.port as number);
    const keyFile = async (name: string, key: string) => {
      const file = path.join(platform.config.host.dataDir, `${name}.key`);
      await fs.writeFile(file, key, { mode: 0o600 });
      return file;
    };
    const ssh = (key: string, sshPort: number) =>
      exec("ssh", [
        ...["-i", key, "-p", String(sshPort), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"],
        ...["-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10"],
        "agent@127.0.0.1",
        "cat ~/work/note.txt",
      ]);
    const first = forked.body.projects[0]!;
    const firstPort = await port(first.project_id);
    await waitFor("sshd of the first fork", 60_000, async () =>
      (
        await ssh(await keyFile("fork", first.ssh.private_key), firstPort).catch(() => undefined)
      )?.stdout.trim() === "at-the-fork"
        ? true
        : undefined,
    );
    await expect(ssh(await keyFile("source", source.privateKey), firstPort)).rejects.toThrow(
      /Permission denied/,
    );
  }, 300_000);

  it("lists the tree: the source's forks, and a fork of a fork under it", async () => {
    const parent = forkIds()[0]!;
    const grand = await h.as("alice", "POST", `/projects/${parent}/fork`, { names: ["grandchild"] });
    expect(grand.statusCode, grand.body).toBe(202);
    const grandId = grand.json().projects[0].project_id as string;
    const tree = (await h.as("alice", "GET", `/projects/${source.id}/forks`)).json();
    expect(tree.project_id).toBe(source.id);
    expect(tree.forks).toHaveLength(FORKS + 1);
    expect(
      tree.forks
        .filter((f: { depth: number }) => f.depth === 1)
        .map((f: { project_id: string }) => f.project_id)
        .sort(),
    ).toEqual([...forkIds()].sort());
    expect(tree.forks.at(-1)).toMatchObject({
      project_id: grandId,
      name: "grandchild",
      forked_from: parent,
      depth: 2,
    });
    expect((await h.as("alice", "GET", `/projects/${grandId}`)).json().forked_from.project_id).toBe(parent);
    expect((await h.as("alice", "GET", `/projects/${source.id}`)).json().forked_from).toBeNull();
    // Another user's tree is a 404, as any project of theirs is.
    expect((await h.as("bob", "GET", `/projects/${source.id}/forks`)).statusCode).toBe(404);
    await h.waitForStatus("alice", grandId, "running", 600_000);
    expect(await inSandbox(grandId, "agent", "cat ~/work/note.txt")).toBe("at-the-fork");
  }, 900_000);

  it("refuses another user's project (404), a count out of range (400), names that do not match (400)", async () => {
    const bob = await h.as("bob", "POST", `/projects/${source.id}/fork`, { count: 1 });
    const none = await h.as("bob", "POST", `/projects/${crypto.randomUUID()}/fork`, { count: 1 });
    expect(bob.statusCode).toBe(404);
    expect(bob.json()).toMatchObject({ error: none.json().error, message: none.json().message });
    expect(await projectsOf("bob")).toEqual([]);
    for (const [body, field, message] of [
      [{ count: 0 }, "count", /too small|>=1/],
      [{ count: 11 }, "count", /too big|<=10/],
      [{ count: "3" }, "count", /number/],
      [{ count: 2, names: ["only-one"] }, "names", /one name per fork: count is 2, names has 1/],
      [{ count: 1, colour: "red" }, "colour", /nrecognized/],
    ] as const) {
      const refused = await h.as("alice", "POST", `/projects/${source.id}/fork`, body);
      expect(refused.statusCode, refused.body).toBe(400);
      expect(refused.json().details, refused.body).toEqual(
        expect.arrayContaining([expect.objectContaining({ field, message: expect.stringMatching(message) })]),
      );
    }
  });

  it("refuses forks beyond the quota, naming it, and makes nothing", async () => {
    const before = (await projectsOf("alice")).length;
    expect(before).toBe(QUOTA);
    const staged = async () => (await fs.readdir(disksRoot())).length;
    const disksBefore = await staged();
    const refused = await h.as("alice", "POST", `/projects/${source.id}/fork`, { count: 2 });
    expect(refused.statusCode, refused.body).toBe(403);
    expect(refused.json()).toMatchObject({
      error: "quota_exceeded",
      message: expect.stringMatching(
        /project quota reached: 2 forks would make 14 projects.*agent-sandbox:runtime\.projectQuota is 12/,
      ),
      details: { quota: QUOTA, config_key: "agent-sandbox:runtime.projectQuota", live: QUOTA, count: 2 },
    });
    expect((await projectsOf("alice")).length).toBe(before);
    expect(await staged()).toBe(disksBefore);
  });

  it("refuses a source in error or being deleted (409 naming its state), and makes nothing", async () => {
    // Room for one more, then a fork of an errored source and of one being deleted.
    const [errored, deleting] = forkIds().slice(-2) as [string, string];
    await setTenantState(h.db, errored, "error", "the test says so");
    const refusedError = await h.as("alice", "POST", `/projects/${errored}/fork`, { count: 1 });
    expect(refusedError.statusCode, refusedError.body).toBe(409);
    expect(refusedError.json()).toMatchObject({
      error: "not_forkable",
      message: `project ${errored} is error: only a running or stopped project can be forked`,
      details: { status: "error" },
    });
    await setTenantState(h.db, errored, "running", null);

    expect((await h.as("alice", "DELETE", `/projects/${deleting}`)).statusCode).toBe(202);
    const refusedDeleting = await h.as("alice", "POST", `/projects/${deleting}/fork`, { count: 1 });
    expect(refusedDeleting.statusCode, refusedDeleting.body).toBe(409);
    expect(refusedDeleting.json()).toMatchObject({ error: "not_forkable", details: { status: "deleting" } });
    await h.waitForStatus("alice", deleting, "gone", 600_000);
    // Its directory under the disks root went with it.
    await expect(fs.stat(path.join(disksRoot(), deleting))).rejects.toThrow(/ENOENT/);
    expect((await projectsOf("alice")).length).toBe(QUOTA - 1);
  }, 900_000);

  it("copies a killed runtime staged for forks it never recorded go at the next start; a recorded fork's stay, and the new runtime's own", async () => {
    // What a runtime killed between its copies and their transaction leaves: staged copies, whole and
    // partial, of projects no tenant row names. A recorded project's staged copy is its create's.
    const unrecorded = "0f0f0f0f-dead-4bad-8bad-0f0f0f0f0f0f";
    const recorded = forkIds()[2]!;
    const stagedOf = (id: string) => stagedHomePath(disksRoot(), id);
    await fs.mkdir(path.dirname(stagedOf(unrecorded)), { recursive: true });
    await fs.writeFile(stagedOf(unrecorded), "a whole copy");
    await fs.writeFile(`${stagedOf(unrecorded)}.partial`, "half a copy");
    await fs.writeFile(stagedOf(recorded), "its create's copy");
    const started = new Date(Date.now() + 1_000); // the runtime's start, after those were written
    // One staged after the start: a fork of the runtime's own, in flight (not recorded yet).
    const inFlight = "0f0f0f0f-beef-4bad-8bad-0f0f0f0f0f0f";
    await fs.mkdir(path.dirname(stagedOf(inFlight)), { recursive: true });
    await fs.writeFile(`${stagedOf(inFlight)}.partial`, "being copied");
    await fs.utimes(`${stagedOf(inFlight)}.partial`, new Date(), new Date(started.getTime() + 1_000));
    try {
      expect((await discardUnrecordedStagedHomes(h.db, stagingRoots(disksRoot()), started)).sort()).toEqual(
        [stagedOf(unrecorded), `${stagedOf(unrecorded)}.partial`].sort(),
      );
      await expect(fs.stat(path.dirname(stagedOf(unrecorded)))).rejects.toThrow(/ENOENT/);
      expect(await fs.readFile(`${stagedOf(inFlight)}.partial`, "utf8")).toBe("being copied");
      expect(await fs.readFile(stagedOf(recorded), "utf8")).toBe("its create's copy");
      // The fork's own filesystem, beside it, was never touched.
      expect(await inSandbox(recorded, "agent", "cat ~/work/note.txt")).toBe("at-the-fork");
    } finally {
      await fs.rm(stagedOf(recorded), { force: true });
      await fs.rm(path.dirname(stagedOf(inFlight)), { recursive: true, force: true });
    }
  });

  it("forks a stopped project: its home as it was when it stopped, its image and bandwidth caps", async () => {
    const id = forkIds()[1]!;
    // The source's own image (as a devcontainer's PATCH gives it: here the sandbox image under another name)
    // and caps; neither is the platform's default, so a fork that took the defaults is told apart.
    const image = FORK_TEST_IMAGE;
    await exec("docker", ["tag", platform.config.tenants.image, image]);
    const caps = { download_kbps: 6000, upload_kbps: 3000 };
    for (const body of [{ image, restart: true }, { bandwidth: caps }]) {
      const patched = await h.as("alice", "PATCH", `/projects/${id}`, body);
      expect(patched.statusCode, patched.body).toBe(202);
      const done = await settledOperation(h.db, patched.json().operation, 600_000);
      expect(done.state, done.error ?? "").toBe("succeeded");
    }
    expect((await h.as("alice", "POST", `/projects/${id}/stop`)).statusCode).toBe(202);
    await h.waitForStatus("alice", id, "stopped");
    // No body at all: one fork, named after its source.
    const response = await h.as("alice", "POST", `/projects/${id}/fork`);
    expect(response.statusCode, response.body).toBe(202);
    expect(response.json().projects.map((p: { name: string }) => p.name)).toEqual(["source-fork-2-fork-1"]);
    const copy = response.json().projects[0].project_id as string;
    await h.waitForStatus("alice", copy, "running", 600_000);
    expect(await inSandbox(copy, "agent", "cat ~/work/note.txt")).toBe("at-the-fork");
    expect((await h.as("alice", "GET", `/projects/${copy}`)).json().bandwidth).toEqual(caps);
    expect((await exec("docker", ["inspect", "-f", "{{.Config.Image}}", `sbx-${copy}`])).stdout.trim()).toBe(
      image,
    );
    // Room for the CLI's fork below.
    expect((await h.as("alice", "DELETE", `/projects/${copy}`)).statusCode).toBe(202);
    await h.waitForStatus("alice", copy, "gone", 600_000);
  }, 900_000);

  it("sbx fork: waits for the forks to run and keeps each one's key; a bad --count is a usage error", async () => {
    await h.app.listen({ host: "127.0.0.1", port: 0 });
    const base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const home = path.join(platform.config.host.dataDir, "sbx-home");
    await fs.mkdir(home, { recursive: true });
    const login = await sbx(
      home,
      home,
      ["login", "--api", base, "--email", emailOf("alice"), "--password-stdin"],
      {
        input: `${PASSWORD}\n`,
      },
    );
    expect(login.code, login.stderr).toBe(0);
    const forkedByCli = await sbx(home, home, [
      "--project",
      source.id,
      "fork",
      "--name",
      "via-cli",
      "--json",
    ]);
    expect(forkedByCli.code, forkedByCli.stderr).toBe(0);
    const answer = forkedByCli.json<{
      source: { project_id: string };
      forks: { project_id: string; name: string; status: string }[];
    }>();
    expect(answer.source.project_id).toBe(source.id);
    expect(answer.forks).toEqual([{ project_id: expect.any(String), name: "via-cli", status: "running" }]);
    const id = answer.forks[0]!.project_id;
    const key = await fs.readFile(path.join(home, "agent-sandbox", "keys", id), "utf8");
    expect(key).toMatch(/BEGIN OPENSSH PRIVATE KEY/);
    expect(await inSandbox(id, "agent", "cat ~/work/note.txt")).toBe("changed");
    const usage = await sbx(home, home, ["--project", source.id, "fork", "--count", "11", "--json"]);
    expect(usage.code).toBe(2);
    expect(usage.stdout).toMatch(/--count must be a whole number from 1 to 10, not 11/);
    const notFound = await sbx(home, home, ["--project", crypto.randomUUID(), "fork", "--json"]);
    expect(notFound.code).toBe(4);
  }, 900_000);
});
