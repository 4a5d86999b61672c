// The warm pool (issue 17): 50 creates at once against a pool of 10 claim exactly 10 members and create
// 40 cold, none twice; every sandbox answers only its owner (terminal and SSH); the pool refills. A claimed
// sandbox gets its owner's allowlist before the answer leaves, and lives the same life as a cold one
// (stop/start keeps home, snapshot and restore, delete leaves nothing). Bad input: a pool the host cannot
// hold, an image that is gone (the pool drains, cold creates go on), a runtime restart with a half-made
// member. Real reconciler, engine, Squid, sshd and terminal proxy. (The attack suite runs its whole table
// against a claimed sandbox too: tests/security/attacks.test.ts.) On Postgres, where transactions run side by
// side: two creates by one user at quota-1, both finding a ready member, end with one claim and one refusal
// naming the quota, however their transactions interleave.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { tenantNames } from "../../components/tenant/names.js";
import { squidPaths } from "../../lib/host/squid.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import type { Database } from "../../runtime/store/db.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { POOL_OWNER, poolCapacityProblem, WarmPool } from "../../runtime/tenants/pool.js";
import { RuntimeConfig, StackConfig } from "../../stacks/config.js";
import { apiHarness, emailOf, testReconciler, type ApiHarness } from "../helpers/api.js";
import { docker, execIn, sshOptions } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";
import { connectTerminal } from "../helpers/terminal-client.js";

const execFileAsync = promisify(execFile);
const POOL = 10;
const USERS = ["u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9"] as const;
type User = (typeof USERS)[number];
const PER_USER = 5;

let platform: TestPlatform;
let h: ApiHarness<User>;
let pool: WarmPool;
let keysDir: string;

interface Created {
  readonly who: User;
  readonly id: string;
  readonly status: number;
  readonly keyFile: string;
  readonly sshPort: number;
}
const created: Created[] = [];

const poolSettings = { size: POOL, idleSize: 0, idleMinutes: 60 };
const imageOnEngine = (image: string) =>
  dockerClient()
    .getImage(image)
    .inspect()
    .then(
      () => true,
      () => false,
    );
/** Each member's sandbox through its backend, as the runtime's pool reaches it (runtime/main.ts). */
const runnersOf = (db: Database) => platformBackends({ docker: () => dockerClient() }).runners(db);

async function readyMembers(): Promise<number> {
  return (await pool.status()).ready;
}

/** `limit` at a time, in order. */
async function inBatches<T>(items: readonly T[], limit: number, each: (item: T) => Promise<void>) {
  for (let i = 0; i < items.length; i += limit) await Promise.all(items.slice(i, i + limit).map(each));
}

async function sshRuns(keyFile: string, port: number): Promise<boolean> {
  return execFileAsync(
    "ssh",
    ["-i", keyFile, "-p", String(port), ...sshOptions(10), "agent@127.0.0.1", "true"],
    {
      timeout: 30_000,
    },
  ).then(
    () => true,
    () => false,
  );
}

/**
 * Each claim's update reconciled its stack with its owner's spec, and the owner's key (the one the claim
 * returned) logs in: sshd may answer slowly on a loaded host, so it is tried for up to a minute.
 */
async function checkClaims(claimed: readonly Created[]): Promise<void> {
  for (const c of claimed) {
    await waitFor(`the claim's update of ${c.id}`, 300_000, async () => {
      const { rows } = await h.db.query<{ state: string }>(
        "select state from operations where project_id = $1 and kind = 'update' order by seq desc limit 1",
        [c.id],
      );
      if (rows[0]?.state === "failed") throw new Error(`the update of ${c.id} failed`);
      return rows[0]?.state === "succeeded" ? true : undefined;
    });
    const { rows } = await h.db.query<{ owner_id: string; spec: { ownerId: string } }>(
      "select owner_id, spec from tenants where project_id = $1",
      [c.id],
    );
    expect(rows[0]!.owner_id).toBe(h.users[c.who].id);
    expect(rows[0]!.spec.ownerId).toBe(h.users[c.who].id);
    // The stack wrote the owner's key where the claim had (same bytes: the key file is what sshd reads).
    const key = await fs.readFile(
      path.join(platform.config.host.dataDir, "tenant-ssh-keys", c.id, "agent"),
      "utf8",
    );
    expect(key).toMatch(/^ssh-ed25519 /);
    await waitFor(`SSH into the claimed ${c.id} with its owner's key`, 60_000, async () =>
      (await sshRuns(c.keyFile, c.sshPort)) ? true : undefined,
    );
  }
}

describe("warm pool", () => {
  beforeAll(async () => {
    platform = await testPlatform(
      {
        subnetPool: "10.254.0.0/18",
        sshPortRange: [28300, 28420],
        leaseSeconds: 10,
        backupIntervalSeconds: 3600,
      },
      { registry: true },
    );
    const { config } = platform;
    const database = await testDatabase("pglite", { under: config.host.dataDir });
    pool = new WarmPool({
      db: database.db,
      defaults: tenantDefaults(config),
      settings: poolSettings,
      runners: runnersOf(database.db),
      imageAvailable: imageOnEngine,
    });
    h = await apiHarness({
      database,
      config,
      users: USERS,
      reconciler: true,
      terminal: true,
      server: { projects: { pool }, admins: [emailOf("u0")] },
    });
    keysDir = path.join(config.host.dataDir, "client-keys");
    await fs.mkdir(keysDir, { recursive: true });
    pool.start(1_000);
    await waitFor("the pool's 10 members running", 600_000, async () =>
      (await readyMembers()) === POOL ? true : undefined,
    );
  }, 900_000);

  // A failed test keeps its evidence, since the platform's host directory goes with the file: Squid's whole
  // cache log and the newest failed operations' errors, in test-artifacts/warm-pool-failed-<n>.log. Two full
  // runs of session 54 failed five tests here ("Squid did not reload") where the file alone passes.
  let failures = 0;
  afterEach(async ({ task }) => {
    if (task.result?.state !== "fail" || !platform) return;
    failures += 1;
    const squid = squidPaths(platform.config.host);
    const cacheLog = path.join(squid.logDir, "cache.log");
    const { rows } = await h.db.query<{ kind: string; error: string }>(
      "select kind, left(error, 2000) as error from operations where error is not null order by seq desc limit 10",
    );
    const squidKids = await execFileAsync("pgrep", ["-af", squid.config]).then(
      (r) => r.stdout,
      () => "(none)",
    );
    await fs.mkdir("test-artifacts", { recursive: true });
    await fs.writeFile(
      path.join("test-artifacts", `warm-pool-failed-${failures}.log`),
      `test: ${task.name}\nsquid processes:\n${squidKids}\nfailed operations, newest first:\n` +
        `${rows.map((o) => `${o.kind}: ${o.error}`).join("\n")}\n\ncache.log:\n` +
        `${await fs.readFile(cacheLog, "utf8").catch((error: Error) => `(unread: ${error.message})`)}`,
    );
  });

  afterAll(async () => {
    await pool?.stop();
    await h?.close();
    await platform?.stop();
  }, 900_000);

  it("50 creates at once against 10 ready members: exactly 10 claims (201, running at once), 40 cold, none twice", async () => {
    // The refill waits until the burst is over, so the counts are exact (a member made during the burst
    // could be claimed too: the refill's own test is the next one).
    await pool.stop();
    const requests = USERS.flatMap((who) => Array.from({ length: PER_USER }, (_, i) => ({ who, i })));
    const answers = await Promise.all(
      requests.map(({ who, i }) =>
        h.as(who, "POST", "/projects", { name: `${who}-${i}` }, { prefer: "respond-async" }),
      ),
    );
    for (const [n, answer] of answers.entries()) {
      expect([201, 202], answer.body).toContain(answer.statusCode);
      const body = answer.json();
      const keyFile = path.join(keysDir, body.project_id);
      await fs.writeFile(keyFile, body.ssh.private_key, { mode: 0o600 });
      created.push({
        who: requests[n]!.who,
        id: body.project_id,
        status: answer.statusCode,
        keyFile,
        sshPort: body.ssh.port,
      });
      // A claim answers as a finished create: running, with its terminal.
      if (answer.statusCode === 201) {
        expect(body.status).toBe("running");
        expect(body.terminal_url).toMatch(/^ws:/);
      }
    }
    expect(created.filter((c) => c.status === 201)).toHaveLength(POOL);
    expect(created.filter((c) => c.status === 202)).toHaveLength(requests.length - POOL);
    expect(new Set(created.map((c) => c.id)).size).toBe(requests.length);
    // Each member went to one owner, the one whose project it is.
    const { rows: claims } = await h.db.query<{ project_id: string; claimed_by: string; user_id: string }>(
      `select m.project_id, m.claimed_by, p.user_id from pool_members m join projects p on p.id = m.project_id
        where m.claimed_at is not null`,
    );
    expect(claims).toHaveLength(POOL);
    for (const claim of claims) expect(claim.claimed_by).toBe(claim.user_id);
    expect(new Set(claims.map((c) => c.project_id))).toEqual(
      new Set(created.filter((c) => c.status === 201).map((c) => c.id)),
    );
    // The creates someone waits on come first in the reconcilers' queue; the pool's own work (its members'
    // creates, the claims' updates, none of which asked for ports) after them (operations.test.ts: the order;
    // pool-claim.test.ts: a claim that asks for ports).
    const { rows: ops } = await h.db.query<{ project_id: string; kind: string; background: boolean }>(
      "select project_id, kind, background from operations where kind in ('create', 'update')",
    );
    for (const c of created) {
      const kinds = ops.filter((op) => op.project_id === c.id).map((op) => `${op.kind} ${op.background}`);
      expect(kinds.sort(), c.id).toEqual(
        c.status === 201 ? ["create true", "update true"] : ["create false"],
      );
    }
    const status = await pool.status();
    expect(status).toMatchObject({ ready: 0, claims: POOL, misses: requests.length - POOL });
    // What an operator sees: /admin/pool (u0 is one; anyone else gets 404) and /metrics (this host).
    const admin = await h.as("u0", "GET", "/admin/pool");
    expect(admin.statusCode, admin.body).toBe(200);
    expect(admin.json()).toMatchObject({ enabled: true, target: POOL, ready: 0, claims: POOL });
    expect(admin.json().misses).toBe(requests.length - POOL);
    expect(Date.parse(admin.json().last_claim_at)).toBeGreaterThan(Date.now() - 600_000);
    expect((await h.as("u1", "GET", "/admin/pool")).statusCode).toBe(404);
    const metrics = (await h.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(metrics).toMatch(new RegExp(`^agent_sandbox_pool_claims_total ${POOL}$`, "m"));
    expect(metrics).toMatch(new RegExp(`^agent_sandbox_pool_misses_total ${requests.length - POOL}$`, "m"));
    expect(metrics).toMatch(/^agent_sandbox_pool_target 10$/m);
    for (const c of created) await h.waitForStatus(c.who, c.id, "running", 600_000);
  }, 1_200_000);

  it("every sandbox answers only its owner: the owner's terminal and key work, another user's id and key do not", async () => {
    expect(created).toHaveLength(USERS.length * PER_USER);
    const other = (c: Created) => created.find((d) => d.who !== c.who)!;
    await inBatches(created, 5, async (c) => {
      const view = await h.as(c.who, "GET", `/projects/${c.id}`);
      const terminal = connectTerminal(view.json().terminal_url);
      try {
        terminal.type(`echo owner-$((40+2))-${c.who}\r`);
        await terminal.waitFor(`owner-42-${c.who}`, 60_000);
      } finally {
        terminal.ws.terminate();
      }
      const stranger = other(c);
      expect((await h.as(stranger.who, "GET", `/projects/${c.id}`)).statusCode).toBe(404);
      // sshd starts a moment after the container reports running.
      await waitFor(`SSH into ${c.id} with its owner's key`, 60_000, async () =>
        (await sshRuns(c.keyFile, c.sshPort)) ? true : undefined,
      );
      expect(await sshRuns(stranger.keyFile, c.sshPort)).toBe(false);
    });
  }, 1_200_000);

  it("the claims' stacks are reconciled with their owners' specs; the pool refills to its size, and shrinks when idle", async () => {
    const claimed = created.filter((c) => c.status === 201);
    // The burst's projects are deleted whatever this finds: left, they would hold their owners' quota and
    // fail every later test of the file for a cause that is not theirs.
    const deletes: number[] = [];
    let checked = false;
    try {
      await checkClaims(claimed);
      checked = true;
    } finally {
      for (const c of created) deletes.push((await h.as(c.who, "DELETE", `/projects/${c.id}`)).statusCode);
      // Failed: gone before the next test creates (a deleting project still counts); else the pool refills
      // while they go, below.
      if (!checked) for (const c of created) await h.waitForStatus(c.who, c.id, "gone", 600_000);
    }
    expect(deletes).toEqual(created.map(() => 202));
    // The pool refills while the burst's projects are deleted (the subnet pool holds both).
    pool.start(1_000);
    await waitFor("the pool refilled", 600_000, async () =>
      (await readyMembers()) === POOL ? true : undefined,
    );
    const { rows: members } = await h.db.query<{ n: number }>(
      "select count(*)::int as n from pool_members m join tenants t on t.project_id = m.project_id where m.claimed_at is null and t.owner_id = $1",
      [POOL_OWNER],
    );
    expect(members[0]!.n).toBe(POOL);
    for (const c of created) await h.waitForStatus(c.who, c.id, "gone", 600_000);

    // Idle: no claim for idleMinutes, and the pool shrinks to idleSize (the newest members go).
    await pool.stop();
    let now = Date.now();
    const idle = new WarmPool({
      db: h.db,
      defaults: tenantDefaults(platform.config),
      settings: { size: POOL, idleSize: 3, idleMinutes: 1 },
      runners: runnersOf(h.db),
      now: () => now,
    });
    now += 61_000;
    await idle.refill();
    expect((await idle.status()).target).toBe(3);
    const { rows: kept } = await h.db.query<{ n: number }>(
      "select count(*)::int as n from pool_members where claimed_at is null",
    );
    expect(kept[0]!.n).toBe(3);
  }, 1_800_000);

  it("a claim applies its own allowlist before it answers; the claimed sandbox stops, starts, snapshots, restores and deletes like a cold one", async () => {
    const answer = await h.as("u0", "POST", "/projects", {
      name: "claimed",
      allowlist: ["allowed.example.test"],
    });
    expect(answer.statusCode, answer.body).toBe(201);
    const id = answer.json().project_id as string;
    const container = tenantNames(id).container;
    // At once: Squid refuses what the member was made with (the default allowlist) and lets the owner's
    // name through to its lookup (which fails: nothing resolves it here, but it is not the ACL's refusal).
    const proxied = async (host: string, refused = true) => {
      const { stdout, stderr } = await execIn(
        container,
        `curl -sS -o /dev/null -w '%{http_code} %{time_total}' --max-time 10 http://${host}/ || true`,
      );
      const [code, seconds] = stdout.trim().split(" ");
      if ((code === "403") === refused) return code;
      // Anything unexpected is worth its evidence: curl's own error, how long it took, what Squid logged and
      // what its files said for this project at that moment.
      const files = squidPaths(platform.config.host);
      const tail = async (file: string) =>
        (await fs.readFile(file, "utf8").catch(() => "")).split("\n").slice(-8).join("\n");
      const fragments = await fs.readdir(files.fragmentsDir).catch(() => [] as string[]);
      const ours = fragments.filter((f) => f.includes(id));
      const texts = await Promise.all(ours.map((f) => fs.readFile(path.join(files.fragmentsDir, f), "utf8")));
      console.log(
        `curl of ${host} from ${id}: ${code} after ${seconds} s (${stderr})\n` +
          `its Squid files: ${ours.map((f, i) => `${f}:\n${texts[i]}`).join("\n")}\n` +
          `access.log:\n${await tail(path.join(files.logDir, "access.log"))}\n` +
          `cache.log:\n${await tail(path.join(files.logDir, "cache.log"))}`,
      );
      return code ?? "";
    };
    expect(await proxied("api.anthropic.com")).toBe("403");
    expect(await proxied("allowed.example.test", false)).not.toBe("403");

    await execIn(container, "echo kept > /home/agent/claimed.txt");
    expect((await h.as("u0", "POST", `/projects/${id}/stop`, {})).statusCode).toBe(202);
    await h.waitForStatus("u0", id, "stopped");
    expect((await h.as("u0", "POST", `/projects/${id}/start`, {})).statusCode).toBe(202);
    await h.waitForStatus("u0", id, "running");
    expect((await execIn(container, "cat /home/agent/claimed.txt")).stdout.trim()).toBe("kept");
    expect(await proxied("api.anthropic.com")).toBe("403");

    await execIn(container, "echo in-image > /opt/snapshotted.txt", "root");
    const snapshot = await h.as("u0", "POST", `/projects/${id}/snapshot`, {});
    expect(snapshot.statusCode, snapshot.body).toBe(202);
    await waitFor("the snapshot", 300_000, async () => {
      const { rows } = await h.db.query<{ state: string; error: string | null }>(
        "select state, error from operations where id = $1",
        [snapshot.json().operation.id],
      );
      if (rows[0]?.state === "failed") throw new Error(`the snapshot failed: ${rows[0].error}`);
      return rows[0]?.state === "succeeded" ? true : undefined;
    });
    await h.waitForStatus("u0", id, "running");
    await execIn(container, "rm /opt/snapshotted.txt", "root");
    expect((await h.as("u0", "POST", `/projects/${id}/restore`, {})).statusCode).toBe(202);
    await waitFor("the restore", 300_000, async () =>
      (await execIn(container, "cat /opt/snapshotted.txt").catch(() => ({ stdout: "" }))).stdout.trim() ===
      "in-image"
        ? true
        : undefined,
    );
    await h.waitForStatus("u0", id, "running");

    expect((await h.as("u0", "DELETE", `/projects/${id}`)).statusCode).toBe(202);
    await h.waitForStatus("u0", id, "gone");
    const names = tenantNames(id);
    expect(await docker("ps", "-aq", "--filter", `name=^${names.container}$`)).toBe("");
    expect(await docker("network", "ls", "-q", "--filter", `name=^${names.network}$`)).toBe("");
    expect(await docker("volume", "ls", "-q", "--filter", `name=^${names.volume}$`)).toBe("");
    await expect(fs.stat(path.join(platform.config.host.dataDir, "tenant-ssh-keys", id))).rejects.toThrow(
      /ENOENT/,
    );
  }, 1_200_000);

  it("ready means interactive: a member is handed out only after its first command ran; one whose command fails is deleted and replaced", async () => {
    pool.start(1_000);
    await waitFor("the pool full", 600_000, async () => ((await readyMembers()) === POOL ? true : undefined));
    // Every member handed out so far had run its first command before its claim.
    const { rows: early } = await h.db.query<{ project_id: string }>(
      "select project_id from pool_members where claimed_at is not null and (ready_at is null or ready_at > claimed_at)",
    );
    expect(early).toEqual([]);
    // A member whose sandbox cannot run a command (its exec path unusable: the setsid every command runs
    // under made unrunnable, as a half-started container's tools can be), and whose check has not run yet
    // (its stack just came up): the pool's check fails it.
    const { rows } = await h.db.query<{ project_id: string }>(
      "select project_id from pool_members where claimed_at is null order by created_at limit 1",
    );
    const broken = rows[0]!.project_id;
    const { container } = tenantNames(broken);
    await docker("exec", "-u", "root", container, "chmod", "000", "/usr/bin/setsid");
    await h.db.query("update pool_members set ready_at = null where project_id = $1", [broken]);
    await pool.check();
    const status = await pool.status();
    expect(status.lastError).toMatch(
      new RegExp(`pool member ${broken} failed its readiness check .*deleted and replaced`),
    );
    const { rows: left } = await h.db.query("select 1 from pool_members where project_id = $1", [broken]);
    expect(left).toEqual([]); // no claim can take it from here on
    // Deleted (its stack destroyed, its container gone) and replaced: the pool is full again.
    await waitFor(`${broken} deleted`, 300_000, async () =>
      (await docker("ps", "-aq", "--filter", `name=^${container}$`)) === "" ? true : undefined,
    );
    await waitFor("the pool refilled", 600_000, async () =>
      (await readyMembers()) === POOL ? true : undefined,
    );
    const claim = await h.as("u3", "POST", "/projects", { name: "after-check" });
    expect(claim.statusCode, claim.body).toBe(201);
    expect(claim.json().project_id).not.toBe(broken);
    const run = await h.as("u3", "POST", `/projects/${claim.json().project_id}/exec`, {
      command: ["node", "-v"],
    });
    expect(run.json()).toMatchObject({ exit_code: 0, stdout: expect.stringMatching(/^v\d+/) });
    await h.as("u3", "DELETE", `/projects/${claim.json().project_id}`);
    await h.waitForStatus("u3", claim.json().project_id, "gone", 600_000);
  }, 1_800_000);

  it("bad input: a pool the host cannot hold is a config error; a gone image drains the pool and creates go on cold", async () => {
    expect(() =>
      StackConfig.parse({
        target: "local",
        tenants: { subnetPool: "10.99.0.0/23", warmPool: { size: 3 } },
      }),
    ).toThrow(/3 members do not fit: subnetPool 10.99.0.0\/23 holds 2 tenants/);
    expect(poolCapacityProblem({ size: 8, idleSize: 0, idleMinutes: 60 }, 4 * 1024 ** 3)).toMatch(
      /8 members of 1024 MiB each need 8192 MiB; this host has 4096 MiB/,
    );
    expect(() =>
      StackConfig.parse({ target: "local", tenants: { warmPool: { size: 1, idleSize: 2 } } }),
    ).toThrow(/idleSize must not exceed size/);

    // The pool's image is gone (another default image, never built): its members are drained, none is
    // made, the operator sees why, and a create is cold.
    await pool.stop();
    const defaults = { ...tenantDefaults(platform.config), image: "agent-sandbox/no-such-image:gone" };
    const gone = new WarmPool({
      db: h.db,
      defaults,
      settings: poolSettings,
      runners: runnersOf(h.db),
      imageAvailable: imageOnEngine,
    });
    await gone.refill();
    const status = await gone.status();
    expect(status.lastError).toMatch(/no-such-image:gone is not on the engine/);
    const { rows: left } = await h.db.query<{ n: number }>(
      "select count(*)::int as n from pool_members where claimed_at is null",
    );
    expect(left[0]!.n).toBe(0); // the old class's members drained
    const cold = await h.as("u1", "POST", "/projects", { name: "cold" }, { prefer: "respond-async" });
    expect(cold.statusCode, cold.body).toBe(202);
    await h.waitForStatus("u1", cold.json().project_id, "running");
    await gone.stop();
  }, 900_000);

  it("a half-made member (its create in flight when the runtime stopped) is finished or drained, never handed out", async () => {
    // A member whose create is queued but not run: a claim passes it over.
    const half = new WarmPool({
      db: h.db,
      defaults: tenantDefaults(platform.config),
      settings: { size: 1, idleSize: 0, idleMinutes: 60 },
      runners: runnersOf(h.db),
      imageAvailable: imageOnEngine,
    });
    await h.reconciler!.stop();
    let member: string;
    try {
      await half.refill();
      const { rows } = await h.db.query<{ project_id: string; state: string }>(
        "select m.project_id, t.state from pool_members m join tenants t on t.project_id = m.project_id where m.claimed_at is null",
      );
      expect(rows).toHaveLength(1);
      expect(rows[0]!.state).toBe("creating");
      member = rows[0]!.project_id;
      const missed = await h.db.transaction((tx) =>
        half.claim(tx, {
          ownerId: h.users.u2.id,
          sshPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAA x",
        }),
      );
      expect(missed).toBeUndefined();
    } finally {
      h.reconciler = testReconciler(h.db, platform.config);
    }
    // A new runtime's reconciler takes the create over: the member is checked (its first command run, as a
    // running pool's refill does), becomes ready, then claimable.
    await waitFor("the half-made member finished", 300_000, async () => {
      await half.check();
      return (await half.status()).ready === 1 ? true : undefined;
    });
    const answer = await h.as("u2", "POST", "/projects", { name: "after-restart" });
    expect(answer.statusCode, answer.body).toBe(201);
    expect(answer.json().project_id).toBe(member);
    await half.stop();
  }, 900_000);
});

describe("warm pool on Postgres", () => {
  const RACERS = ["r0", "r1", "r2", "r3", "r4"] as const;
  type Racer = (typeof RACERS)[number];
  let racePlatform: TestPlatform;
  let database: TestDatabase;
  let race: ApiHarness<Racer>;
  let racePool: WarmPool;

  beforeAll(async () => {
    racePlatform = await testPlatform({
      subnetPool: "10.232.0.0/21",
      sshPortRange: [28620, 28640],
      leaseSeconds: 10,
      backupIntervalSeconds: 3600,
    });
    database = await testDatabase("postgres", { under: racePlatform.config.host.dataDir });
    racePool = new WarmPool({
      db: database.db,
      defaults: tenantDefaults(racePlatform.config),
      settings: { size: 2, idleSize: 0, idleMinutes: 60 },
      runners: runnersOf(database.db),
      imageAvailable: imageOnEngine,
    });
    race = await apiHarness({
      database,
      config: racePlatform.config,
      users: RACERS,
      reconciler: true,
      server: { projects: { pool: racePool }, limits: { ...RuntimeConfig.parse({}), projectQuota: 1 } },
    });
  }, 900_000);

  afterAll(async () => {
    await racePool?.stop();
    await race?.close();
    await racePlatform?.stop();
  }, 900_000);

  it("two creates at once by one user at quota-1, with two ready members: one claim, one refusal naming the quota, every time", async () => {
    // The race is forced, not hoped for: a connection of the test's own holds a lock that keeps every
    // insert into projects waiting while both creates are in their transactions. Without the owner's lock
    // both reach that insert (each counts the user's projects without the other's, and both commit); with
    // it, the second waits for the first's commit before it claims anything. Each round is a new user.
    const gate = new pg.Client({ connectionString: database.url });
    await gate.connect();
    try {
      for (const who of RACERS) {
        racePool.start(1_000);
        await waitFor("two ready members", 600_000, async () =>
          (await racePool.status()).ready >= 2 ? true : undefined,
        );
        await racePool.stop();
        await gate.query("begin");
        await gate.query("lock table projects in share mode");
        const answers = Promise.all(
          [1, 2].map((n) =>
            race.as(who, "POST", "/projects", { name: `${who}-${n}` }, { prefer: "respond-async" }),
          ),
        );
        await waitFor("both creates in their transactions, waiting", 60_000, async () => {
          const { rows } = await gate.query<{ n: number }>(
            `select count(*)::int as n from pg_locks
              where not granted and (locktype = 'advisory' or relation = 'projects'::regclass)`,
          );
          return rows[0]!.n === 2 ? true : undefined;
        });
        await gate.query("commit");
        const [first, second] = (await answers).sort((a, b) => a.statusCode - b.statusCode);
        expect(first!.statusCode, first!.body).toBe(201);
        expect(second!.statusCode, second!.body).toBe(403);
        expect(second!.json()).toMatchObject({
          error: "quota_exceeded",
          details: { quota: 1, config_key: "agent-sandbox:runtime.projectQuota" },
        });
        expect(second!.json().message).toContain("at most 1 projects per user");
        const { rows: owned } = await race.db.query<{ id: string }>(
          "select id from projects where user_id = $1",
          [race.users[who].id],
        );
        expect(owned.map((p) => p.id)).toEqual([first!.json().project_id]);
        const { rows: claimed } = await race.db.query<{ project_id: string }>(
          "select project_id from pool_members where claimed_by = $1",
          [race.users[who].id],
        );
        expect(claimed.map((c) => c.project_id)).toEqual([first!.json().project_id]);
        // The refused create left no member half-claimed: the other ready one is still there to hand out.
        expect((await racePool.status()).ready).toBe(1);
        expect((await race.as(who, "DELETE", `/projects/${owned[0]!.id}`)).statusCode).toBe(202);
      }
    } finally {
      await gate.query("rollback").catch(() => undefined);
      await gate.end();
    }
  }, 1_800_000);
});
