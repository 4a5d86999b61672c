// Rollout previews and rollouts (issue 14), through the commands an operator and CI run
// (`npm run preview:tenants`, `npm run rollout`), each in a checkout of its own: this one, unchanged; one
// whose tenant program puts a new label on the tenant's engine objects; one that does not compile; one
// whose program fails for the canary. Real tenants (engine, provider, iptables, Squid), Postgres shared
// by the runtime's reconciler and the command.
import { execFile, execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { stateBackendUrl } from "../../runtime/tenants/config.js";
import { STACK_KEY_PROVIDER } from "../../runtime/tenants/stack-keys.js";
import { currentProgramVersion, tenantProgramVersion } from "../../stacks/tenant/version.js";
import { apiHarness, writeStackFile, type ApiHarness } from "../helpers/api.js";
import { docker, execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";

const TENANTS = 3;
const LABEL = "dev.agent-sandbox.rollout-test";
let platform: TestPlatform;
let database: TestDatabase;
let h: ApiHarness<"alice">;
let configFile: string;
const ids: string[] = [];
const checkouts: string[] = [];

/**
 * A copy of this checkout (its tracked and new files; node_modules and the built plugins shared), with
 * `edit` applied to components/tenant/tenant.ts.
 */
function checkout(edit?: (source: string) => string): string {
  const root = mkdtempSync(path.join(os.tmpdir(), "checkout-"));
  checkouts.push(root);
  const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
    cwd: REPO_ROOT,
    encoding: "utf8",
  })
    .split("\0")
    .filter(Boolean);
  for (const file of files) {
    try {
      mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
      cpSync(path.join(REPO_ROOT, file), path.join(root, file));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error; // deleted, not yet committed
    }
  }
  for (const shared of ["node_modules", "dist"])
    symlinkSync(path.join(REPO_ROOT, shared), path.join(root, shared));
  if (edit) {
    const program = path.join(root, "components/tenant/tenant.ts");
    const source = readFileSync(program, "utf8");
    const edited = edit(source);
    if (edited === source) throw new Error("the edit did not change the tenant program");
    writeFileSync(program, edited);
  }
  return root;
}

/** The label edit: every engine object of every tenant gets one more label. */
const withLabel = (source: string) => {
  const anchor = "[LABELS.managedBy]: MANAGED_BY,";
  if (!source.includes(anchor)) throw new Error(`components/tenant/tenant.ts no longer has ${anchor}`);
  return source.replace(anchor, `${anchor}\n      "${LABEL}": "b",`);
};

interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** `npm run <script> -- args` in `root`, as an operator or CI runs it, on this platform's config. */
function npmRun(root: string, script: string, args: string[], env: Record<string, string> = {}) {
  return new Promise<CommandResult>((resolve) => {
    execFile(
      "npm",
      ["run", "--silent", script, "--", ...args],
      {
        cwd: root,
        env: { ...process.env, AGENT_SANDBOX_CONFIG: configFile, DATABASE_URL: database.url!, ...env },
        maxBuffer: 64 * 1024 * 1024,
        timeout: 900_000,
      },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === "number" ? error.code : -1) : 0, stdout, stderr }),
    );
  });
}

const json = (file: string) => JSON.parse(readFileSync(file, "utf8"));
const scratch = () => mkdtempSync(path.join(os.tmpdir(), "rollout-out-"));

/** Every file of the state backend and its content's digest: "no stack touched" is this unchanged. */
async function stateDigest(): Promise<Record<string, string>> {
  const root = path.join(platform.config.host.dataDir, "state");
  const out: Record<string, string> = {};
  for (const entry of await fs.readdir(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    out[path.relative(root, file)] = createHash("sha256")
      .update(await fs.readFile(file))
      .digest("hex");
  }
  return out;
}

const containerOf = async (id: string) =>
  JSON.parse(await docker("inspect", tenantNames(id).container))[0] as {
    Id: string;
    State: { Running: boolean };
    Config: { Labels: Record<string, string> };
  };

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.241.0.0/22",
    sshPortRange: [27620, 27630],
    leaseSeconds: 10,
    maxConcurrent: 3,
  });
  const { config } = platform;
  database = await testDatabase("postgres");
  h = await apiHarness({ database, config, users: ["alice"], reconciler: true });
  configFile = await writeStackFile(config.host, "rollout", {
    target: "local",
    host: config.host,
    tenants: config.tenants,
  });
}, 1_200_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
  for (const root of checkouts) rmSync(root, { recursive: true, force: true });
}, 900_000);

describe("rollout previews and rollouts", () => {
  it("with no tenants: the preview says there is nothing to preview, the rollout that there is nothing to roll out", async () => {
    const out = scratch();
    const preview = await npmRun(REPO_ROOT, "preview:tenants", ["--json", `${out}/p.json`]);
    expect(preview.code, preview.stderr).toBe(0);
    expect(preview.stdout).toContain("there are no tenant stacks");
    expect(json(`${out}/p.json`)).toMatchObject({ compiled: true, tenants: [] });
    const rollout = await npmRun(REPO_ROOT, "rollout", ["--json", `${out}/r.json`]);
    expect(rollout.code, rollout.stderr).toBe(0);
    expect(rollout.stdout).toContain("Nothing to roll out");
    expect(json(`${out}/r.json`)).toMatchObject({ waves: [], completed: true, tenants: [] });
  });

  it("tenants record the program version that applied them; an unchanged checkout previews all unchanged", async () => {
    for (let i = 0; i < TENANTS; i++) {
      const created = await h.as("alice", "POST", "/projects", { name: `rollout-${i}` });
      expect(created.statusCode, created.body).toBe(202);
      ids.push(created.json().project_id);
    }
    for (const id of ids) await h.waitForStatus("alice", id, "running", 600_000);
    const version = currentProgramVersion().version;
    const { rows } = await h.db.query<{ program_version: string }>(
      "select program_version from tenants where state <> 'deleted'",
    );
    expect(rows.map((row) => row.program_version)).toEqual(ids.map(() => version));

    const out = scratch();
    const preview = await npmRun(REPO_ROOT, "preview:tenants", [
      "--json",
      `${out}/p.json`,
      "--markdown",
      `${out}/p.md`,
    ]);
    expect(preview.code, preview.stderr).toBe(0);
    const result = json(`${out}/p.json`);
    expect(result.program.version).toBe(version);
    expect(result.tenants).toEqual(
      [...ids].sort().map((projectId) => ({
        projectId,
        status: "unchanged",
        recordedVersion: version,
        changes: [],
      })),
    );
    expect(readFileSync(`${out}/p.md`, "utf8")).toContain(`${TENANTS} unchanged, 0 changing`);
    // Longer than its waits: a create slower than them fails with the project's status and operations.
  }, 900_000);

  it("a new label in the program: the preview lists every tenant as changing it, and touches nothing", async () => {
    const labelled = checkout(withLabel);
    const before = await stateDigest();
    const out = scratch();
    const preview = await npmRun(labelled, "preview:tenants", ["--json", `${out}/p.json`]);
    expect(preview.code, preview.stderr).toBe(0);
    const result = json(`${out}/p.json`);
    expect(result.program.version).toBe(tenantProgramVersion(labelled).version);
    expect(result.program.version).not.toBe(currentProgramVersion().version);
    expect(result.tenants).toHaveLength(TENANTS);
    for (const tenant of result.tenants) {
      expect(tenant.status).toBe("changes");
      const byType = new Map<string, { op: string; properties: string[] }>(
        tenant.changes.map((c: { type: string }) => [c.type, c]),
      );
      // Docker labels cannot change in place: the network is replaced for its labels, and the container
      // with it (the engine names the properties that depend on the network: it is deleted first). The
      // home volume never is (its labels are the ones of its creation): no rollout loses /home/agent.
      const summary = `${tenant.projectId} ${JSON.stringify(tenant.changes)}`;
      expect(byType.get("sandbox:docker:Network"), summary).toMatchObject({
        op: "replace",
        properties: ["labels"],
      });
      expect(byType.get("sandbox:docker:Container"), summary).toMatchObject({ op: "replace" });
      expect(byType.has("sandbox:docker:Volume")).toBe(false);
    }
    expect(preview.stdout).toMatch(/`sandbox:docker:Network` `[^`]+`: `labels`/);
    expect(await stateDigest()).toEqual(before);
  });

  it("a program that does not compile: the preview says so before touching any stack", async () => {
    const broken = checkout((s) => `${s}\nexport const broken: number = "not a number";\n`);
    const before = await stateDigest();
    const out = scratch();
    const preview = await npmRun(broken, "preview:tenants", ["--json", `${out}/p.json`]);
    expect(preview.code).toBe(1);
    expect(preview.stdout).toContain("does not compile; no stack was previewed");
    expect(preview.stdout).toMatch(/components\/tenant\/tenant\.ts\(\d+,\d+\): error TS2322/);
    expect(json(`${out}/p.json`)).toMatchObject({ compiled: false });
    const rollout = await npmRun(broken, "rollout", []);
    expect(rollout.code).toBe(1);
    expect(rollout.stderr).toContain("does not compile; no tenant was touched");
    expect(await stateDigest()).toEqual(before);
  });

  it("a rollout whose canary fails stops after the canary and reports each tenant's version", async () => {
    const canary = ids[1]!;
    const buggy = checkout((s) =>
      withLabel(s).replace(
        'super("sandbox:tenant:Tenant", name, {}, opts);',
        'super("sandbox:tenant:Tenant", name, {}, opts);\n    if (spec.projectId === process.env.INJECT_FAILURE) throw new Error("injected failure in the canary");',
      ),
    );
    const containersBefore = await Promise.all(ids.map(async (id) => (await containerOf(id)).Id));
    const out = scratch();
    const rollout = await npmRun(
      buggy,
      "rollout",
      ["--canary", canary, "--share", "0.5", "--json", `${out}/r.json`],
      {
        INJECT_FAILURE: canary,
      },
    );
    expect(rollout.code, rollout.stderr).toBe(1);
    const report = json(`${out}/r.json`);
    const old = currentProgramVersion().version;
    expect(report).toMatchObject({ completed: false, failedWave: 1 });
    expect(report.waves[0]).toEqual([canary]);
    expect(report.waves.flat().sort()).toEqual([...ids].sort());
    const byId = new Map(report.tenants.map((t: { projectId: string }) => [t.projectId, t]));
    expect(byId.get(canary)).toMatchObject({
      wave: 1,
      outcome: "failed",
      error: expect.stringContaining("injected failure in the canary"),
      programVersion: old,
    });
    for (const id of ids.filter((id) => id !== canary))
      expect(byId.get(id)).toMatchObject({ outcome: "not attempted", programVersion: old });
    expect(rollout.stdout).toContain("wave 1 (the canary) failed");
    // Nothing was replaced: the later waves never ran and the canary failed before any resource changed.
    expect(await Promise.all(ids.map(async (id) => (await containerOf(id)).Id))).toEqual(containersBefore);
  });

  it("a rollout in waves applies the program to every tenant; afterwards its preview is all unchanged", async () => {
    const labelled = checkout(withLabel);
    const version = tenantProgramVersion(labelled).version;
    for (const id of ids)
      expect((await execIn(tenantNames(id).container, `echo kept-${id} > ~/rollout-marker`)).code).toBe(0);
    const out = scratch();
    const dry = await npmRun(labelled, "rollout", ["--dry-run", "--share", "0.5", "--canary", ids[2]!]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain(`- canary: ${ids[2]}`);
    const rollout = await npmRun(labelled, "rollout", [
      "--share",
      "0.5",
      "--canary",
      ids[2]!,
      "--json",
      `${out}/r.json`,
    ]);
    expect(rollout.code, rollout.stderr).toBe(0);
    const report = json(`${out}/r.json`);
    expect(report).toMatchObject({ completed: true });
    expect(report.waves.map((wave: string[]) => wave.length)).toEqual([1, 1, 1]);
    for (const tenant of report.tenants)
      expect(tenant).toMatchObject({ outcome: "applied", programVersion: version });
    for (const id of ids) {
      const container = await containerOf(id);
      expect(container.State.Running).toBe(true);
      expect(container.Config.Labels[LABEL]).toBe("b");
      // A new container on the same home volume: the agent's files are all there.
      expect((await execIn(tenantNames(id).container, "cat ~/rollout-marker")).stdout.trim()).toBe(
        `kept-${id}`,
      );
      expect(await h.statusOf("alice", id)).toBe("running");
    }
    const preview = await npmRun(labelled, "preview:tenants", ["--json", `${out}/p.json`]);
    expect(preview.code, preview.stderr).toBe(0);
    expect(json(`${out}/p.json`).tenants.map((t: { status: string }) => t.status)).toEqual(
      ids.map(() => "unchanged"),
    );
    const again = await npmRun(labelled, "rollout", []);
    expect(again.stdout).toContain("Nothing to roll out");
  });

  it("the drift check from the state backend alone: one memory limit changed out of band is reported, the rest clean", async () => {
    const out = scratch();
    const clean = await npmRun(REPO_ROOT, "drift:check", ["--json", `${out}/clean.json`]);
    expect(clean.code, clean.stderr).toBe(0);
    expect(json(`${out}/clean.json`).tenants.map((t: { status: string }) => t.status)).toEqual(
      ids.map(() => "clean"),
    );
    const changed = ids[0]!;
    await docker("update", "--memory", "700m", "--memory-swap", "700m", tenantNames(changed).container);
    const drifted = await npmRun(REPO_ROOT, "drift:check", [
      "--json",
      `${out}/d.json`,
      "--markdown",
      `${out}/d.md`,
    ]);
    expect(drifted.code, drifted.stderr).toBe(3);
    const byId = new Map(json(`${out}/d.json`).tenants.map((t: { projectId: string }) => [t.projectId, t]));
    expect(byId.get(changed)).toMatchObject({
      status: "drifted",
      resources: [
        expect.objectContaining({
          type: "sandbox:docker:Container",
          change: "changed",
          properties: expect.arrayContaining(["memoryBytes"]),
        }),
      ],
    });
    for (const id of ids.filter((id) => id !== changed))
      expect(byId.get(id)).toMatchObject({ status: "clean" });
    expect(readFileSync(`${out}/d.md`, "utf8")).toContain(`### ${changed}: drifted`);
  });

  it("an operator's pulumi on one tenant's stack (`npm run tenant-pulumi`): its secrets open through that process's own key service; bad input is named", async () => {
    const id = ids[0]!;
    const sealed = await npmRun(REPO_ROOT, "tenant-pulumi", [id, "stack", "export"]);
    expect(sealed.code, sealed.stderr).toBe(0);
    // Made by the runtime with its key service: a data key sealed by it, the project's secrets file (its
    // agent.env's content) only as ciphertext.
    expect(JSON.parse(sealed.stdout).deployment.secrets_providers).toEqual({
      type: "cloud",
      state: { url: STACK_KEY_PROVIDER, encryptedkey: expect.any(String) },
    });
    expect(sealed.stdout).toContain('"ciphertext"');
    const secretsFile =
      "# Project secrets (PUT /projects/{id}/secrets/{name}), written by the tenant's stack.";
    expect(sealed.stdout).not.toContain(secretsFile);
    const shown = await npmRun(REPO_ROOT, "tenant-pulumi", [id, "stack", "export", "--show-secrets"]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(JSON.stringify(JSON.stringify(`${secretsFile}\n`)).slice(1, -1));
    const absent = await npmRun(REPO_ROOT, "tenant-pulumi", ["no-such-project", "stack", "export"]);
    expect(absent.code).toBe(1);
    expect(absent.stderr).toContain(
      `tenant-pulumi: no stack tenant-no-such-project in ${stateBackendUrl(platform.config)}`,
    );
    const bare = await npmRun(REPO_ROOT, "tenant-pulumi", [id]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain("tenant-pulumi: no pulumi arguments");
    const other = await npmRun(REPO_ROOT, "tenant-pulumi", [id, "stack", "export", "--stack", "x"]);
    expect(other.code).toBe(2);
    expect(other.stderr).toContain(`the stack is the project's (tenant-${id}); leave out --stack`);
  });

  it("bad input: an unknown flag, a share out of range, an unknown canary", async () => {
    expect(await npmRun(REPO_ROOT, "preview:tenants", ["--bogus"])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining("Unknown option '--bogus'"),
    });
    expect(await npmRun(REPO_ROOT, "rollout", ["--share", "0"])).toMatchObject({
      code: 1,
      stderr: expect.stringContaining("--share must be a fraction in (0, 1], got 0"),
    });
    expect(await npmRun(REPO_ROOT, "rollout", ["--canary", "no-such-project", "--all"])).toMatchObject({
      code: 1,
      stderr: expect.stringContaining("canary no-such-project is not a tenant of this platform"),
    });
  });
});
