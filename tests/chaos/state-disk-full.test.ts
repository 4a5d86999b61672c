// The state backend's disk full (issue 18), on one platform (the runtime as its own process, as
// `npm run local` runs it) whose tenant stacks' state backend, `<dataDir>/state`, is a real 16 MiB tmpfs of
// this file's own. With a sandbox running, a filler file takes every free byte of it and a stop is asked for
// (a stop writes the stack's state). What a user may expect:
// - the stop does not happen half-way: the sandbox runs on, the stack's saved state is the one before,
//   byte for byte, and still parses; `/healthz` is 503 naming the full state backend and its path, and the
//   operation's progress says why it is not done (no space left on the state backend, with the path);
// - once the filler is removed, with no one asking again, the queued stop finishes, the sandbox is stopped,
//   the backend holds no half-written file, and the orphan sweep finds nothing; a start afterwards works
//   and the home's files are intact.
// Before, the operation failed with "2 errors occurred:" (the cause, the lock's write, was dropped), and the
// lock write cut short by the full disk left `<lock>.json.<n>.tmp` in the stack's lock directory, which the
// engine reads as a lock: every later operation of the project failed with "unexpected end of JSON input",
// space or not, until an operator removed the file.
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, promises as fs, renameSync, statfsSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { operationEvents } from "../../runtime/store/operations.js";
import { fileBackendDir } from "../../runtime/stack-state.js";
import { stateBackendUrl } from "../../runtime/tenants/config.js";
import { fileBackendStacksDir, TENANT_PROJECT } from "../../runtime/tenants/stack.js";
import { docker, execIn } from "../helpers/containers.js";
import { chaosPlatform, type ChaosPlatform } from "./platform.js";

const exec = promisify(execFile);
const STATE_SIZE = "16m";

let chaos: ChaosPlatform;
/** The tenant stacks' state backend, a tmpfs of its own while this file runs. */
let stateDir = "";
let mounted = false;
let filler = "";
let tenant: { id: string; container: string; checkpoint: string };

async function latestOperation(projectId: string): Promise<string> {
  const { rows } = await chaos.db.query<{ id: string }>(
    "select id from operations where project_id = $1 order by seq desc limit 1",
    [projectId],
  );
  return rows[0]!.id;
}

const freeBytes = () => {
  const stats = statfsSync(stateDir);
  return stats.bavail * stats.bsize;
};

/** Every file under the backend's `.pulumi` whose write never finished. */
async function interruptedWrites(): Promise<string[]> {
  const root = path.join(stateDir, ".pulumi");
  const entries = await fs.readdir(root, { recursive: true });
  return entries.filter((entry) => entry.endsWith(".tmp")).sort();
}

const lockDir = (id: string) =>
  path.join(stateDir, ".pulumi", "locks", "organization", TENANT_PROJECT, tenantNames(id).stack);

const lockFiles = async (id: string) => (existsSync(lockDir(id)) ? fs.readdir(lockDir(id)) : []);

const containerRunning = (container: string) =>
  docker("inspect", "--format", "{{.State.Running}}", container).catch(() => "absent");

async function health(): Promise<{
  status: number;
  checks: { name: string; ready: boolean; detail: string }[];
}> {
  const answer = await fetch(`${chaos.runtime.base}/healthz`);
  return { status: answer.status, checks: ((await answer.json()) as { checks: [] }).checks };
}

/** Waits for `/healthz` to answer 200; else fails with the checks that were not ready. */
const healthy = (what: string) =>
  waitFor(what, 30_000, async () => {
    const { status, checks } = await health();
    if (status === 200) return true;
    throw new Error(`/healthz ${status}: ${JSON.stringify(checks.filter((c) => !c.ready))}`);
  });

beforeAll(async () => {
  chaos = await chaosPlatform({
    tenants: { subnetPool: "10.230.0.0/23", sshPortRange: [28460, 28465], leaseSeconds: 5 },
    logDir: path.join(os.tmpdir(), `state-disk-full-${Date.now()}`),
  });
  stateDir = fileBackendDir(stateBackendUrl(chaos.platform.config))!;
  // The runtime made the directory at start; whatever it holds moves onto the small filesystem.
  const before = `${stateDir}.before`;
  renameSync(stateDir, before);
  mkdirSync(stateDir);
  await exec("mount", ["-t", "tmpfs", "-o", `size=${STATE_SIZE},mode=755`, "tmpfs", stateDir]);
  mounted = true;
  await exec("cp", ["-a", `${before}/.`, stateDir]);
  await fs.rm(before, { recursive: true, force: true });
  filler = path.join(stateDir, "filler");

  const created = await chaos.api("POST", "/projects", { name: "disk-full", idle_shutdown: false });
  if (created.status >= 300)
    throw new Error(`POST /projects: ${created.status} ${JSON.stringify(created.body)}`);
  const id: string = created.body.project_id;
  const done = await chaos.settled(await latestOperation(id));
  if (done.state !== "succeeded") throw new Error(`create of ${id}: ${done.state}: ${done.error}`);
  tenant = {
    id,
    container: tenantNames(id).container,
    checkpoint: path.join(fileBackendStacksDir(stateBackendUrl(chaos.platform.config))!, `tenant-${id}.json`),
  };
}, 600_000);

afterAll(async () => {
  if (filler) await fs.rm(filler, { force: true });
  // The tenants go while their state is still there; then the filesystem, before the platform removes its
  // directories.
  await chaos?.runtime?.stop().catch(() => undefined);
  if (mounted)
    await exec("umount", [stateDir]).catch(() => exec("umount", ["-l", stateDir]).catch(() => undefined));
  await chaos?.stop();
}, 300_000);

describe("the state backend's disk full", () => {
  it("a stop waits without half-doing anything, says why, and finishes by itself once there is room", async () => {
    const { id, container, checkpoint } = tenant;
    const content = randomBytes(8).toString("hex");
    const wrote = await execIn(container, `printf %s ${content} > disk-full && sync`);
    expect(wrote.code, wrote.stderr).toBe(0);
    const saved = await fs.readFile(checkpoint);
    const digest = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");
    expect(JSON.parse(saved.toString()).checkpoint.latest.resources.length).toBeGreaterThan(0);
    await healthy("the runtime healthy");

    // Every free byte of the filesystem (dd ends with "No space left on device").
    await exec("dd", ["if=/dev/zero", `of=${filler}`, "bs=64k"]).catch(() => undefined);
    expect(freeBytes()).toBe(0);
    const unhealthy = await health();
    expect(unhealthy.status).toBe(503);
    const check = unhealthy.checks.find((c) => c.name === "state-backend");
    expect(check?.ready).toBe(false);
    expect(check?.detail).toContain(`no space left on the state backend ${stateDir}`);

    const asked = await chaos.api("POST", `/projects/${id}/stop`, {});
    expect(asked.status, JSON.stringify(asked.body)).toBe(202);
    const operationId = await latestOperation(id);
    // The operation says why it is not done, where its user looks (the project's operation progress).
    const waiting = await waitFor("the stop to wait for space", 120_000, async () => {
      const view = await chaos.api("GET", `/projects/${id}`);
      const last = view.body.operation?.progress?.last as { message?: string } | null;
      return last?.message?.includes("no space left on the state backend") ? view.body : undefined;
    });
    console.log(`disk full: the stop's progress says: ${waiting.operation.progress.last.message}`);
    expect(waiting.operation.progress.last.message).toContain(stateDir);
    expect(waiting.operation.state).toBe("running");
    expect(waiting.status).toBe("running");
    console.log(`disk full: left in the stack's lock directory: ${JSON.stringify(await lockFiles(id))}`);

    // Longer than the lease (5 s) and several polls: it keeps waiting, and nothing was half-done.
    await new Promise((resolve) => setTimeout(resolve, 8_000));
    const operation = await chaos.api("GET", `/projects/${id}`);
    expect(operation.body.operation.id).toBe(operationId);
    expect(operation.body.operation.state).toBe("running");
    expect(await containerRunning(container)).toBe("true");
    expect((await execIn(container, "cat disk-full")).stdout).toBe(content);
    const during = await fs.readFile(checkpoint);
    expect(digest(during)).toBe(digest(saved));
    expect([chaos.runtime.child.exitCode, chaos.runtime.child.signalCode]).toEqual([null, null]);

    await fs.rm(filler);
    const freedAt = Date.now();
    const done = await chaos.settled(operationId, 120_000);
    const seconds = (Date.now() - freedAt) / 1000;
    console.log(`disk full: the stop ${done.state} ${seconds.toFixed(1)} s after the filler was removed`);
    expect(done.state, done.error ?? "").toBe("succeeded");
    expect(done.attempt).toBeGreaterThan(1);
    const events = await operationEvents(chaos.db, operationId);
    expect(events.some((e) => String(e.event.message).includes(stateDir))).toBe(true);

    expect(await containerRunning(container)).toBe("false");
    expect((await chaos.api("GET", `/projects/${id}`)).body.status).toBe("stopped");
    await healthy("the runtime healthy again");
    expect(
      JSON.parse(await fs.readFile(checkpoint, "utf8")).checkpoint.latest.resources.length,
    ).toBeGreaterThan(0);
    expect(await lockFiles(id)).toEqual([]);
    expect(await interruptedWrites()).toEqual([]);
    expect(await chaos.orphans()).toEqual([]);

    // The project goes on as before: a start works, the home is as it was.
    const started = await chaos.api("POST", `/projects/${id}/start`, {});
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    const again = await chaos.settled(await latestOperation(id), 120_000);
    expect(again.state, again.error ?? "").toBe("succeeded");
    expect(await containerRunning(container)).toBe("true");
    await waitFor("the sandbox's home to be ready", 60_000, async () =>
      (await execIn(container, "test -f .sandbox_initialized")).code === 0 ? true : undefined,
    );
    expect((await execIn(container, "cat disk-full")).stdout).toBe(content);
    expect(await chaos.orphans()).toEqual([]);
  }, 400_000);
});
