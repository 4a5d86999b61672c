// A fourth backend through the whole API (issue 40's seam): the tests' own directory backend
// (tests/helpers/directory-backend.ts), registered beside the platform's three and named by no file of the
// runtime, is created, run in, attached to, snapshotted, stopped and deleted through the project routes, the
// real reconciler and engine (its own stack program, through the platform's provider) and the terminal
// proxy, exactly as a container is.
import { existsSync, promises as fs, readdirSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import type { SandboxBackends } from "../../runtime/backends/registry.js";
import { fileBackendStacksDir } from "../../runtime/tenants/stack.js";
import { tenantStackOptions } from "../../runtime/tenants/config.js";
import { StackConfig } from "../../stacks/config.js";
import type { ApiHarness } from "../helpers/api.js";
import { directoryBackend, directoryPaths, harnessWithBackend } from "../helpers/directory-backend.js";
import { isolatedHostConfig } from "../helpers/host.js";
import { connectTerminal } from "../helpers/terminal-client.js";

let h: ApiHarness<"alice">;
let config: StackConfig;
let root: string;
let backends: SandboxBackends;
let projectId: string;

/** The project's newest operation of `kind`, once it has finished; it must have succeeded. */
const settled = async (kind: string) => {
  const done = await waitFor(`${kind} of ${projectId}`, 120_000, async () => {
    const project = (await h.as("alice", "GET", `/projects/${projectId}`)).json();
    return project.operation?.kind === kind && ["succeeded", "failed"].includes(project.operation.state)
      ? project
      : undefined;
  });
  expect(done.operation, JSON.stringify(done.operation)).toMatchObject({ state: "succeeded" });
  return done;
};
const exec = async (command: string) => {
  const response = await h.as("alice", "POST", `/projects/${projectId}/exec`, { command });
  return { status: response.statusCode, body: response.json() };
};
/** The stack's checkpoint: what the engine recorded of the project's resources. */
const checkpoint = async () => {
  const dir = fileBackendStacksDir(tenantStackOptions(config).backendUrl)!;
  const file = path.join(dir, `tenant-${projectId}.json`);
  if (!existsSync(file)) return undefined;
  const state = JSON.parse(await fs.readFile(file, "utf8")) as {
    checkpoint: { latest?: { resources?: { type: string }[] } };
  };
  return (state.checkpoint.latest?.resources ?? []).map((r) => r.type);
};

beforeAll(async () => {
  const host = await isolatedHostConfig();
  root = path.join(path.dirname(host.configDir), "directories");
  config = StackConfig.parse({
    target: "local",
    host,
    tenants: { image: "no-image-needed", subnetPool: "10.225.0.0/24", sshPortRange: [29100, 29105] },
  });
  ({ h, backends } = await harnessWithBackend(config, directoryBackend(root)));
}, 300_000);

afterAll(async () => {
  await h?.close();
  if (config) await fs.rm(path.dirname(config.host.configDir), { recursive: true, force: true });
}, 300_000);

describe("a fourth backend, registered by the test alone", () => {
  it("a backend this platform does not run is refused naming those it does; a second of a kind is not registered", async () => {
    const refused = await h.as("alice", "POST", "/projects", { name: "x", backend: "firecracker" });
    expect(refused.statusCode, refused.body).toBe(400);
    expect(refused.json().message).toBe(
      'invalid body: backend: Invalid option: expected one of "container"|"microvm"|"kubernetes"|"directory"',
    );
    // The API's document lists what a create may name: the registry's kinds.
    const document = (await h.as("nobody", "GET", "/openapi.json")).json();
    const create = document.paths["/projects"].post.requestBody.content["application/json"].schema;
    expect(create.properties.backend.enum).toEqual(["container", "microvm", "kubernetes", "directory"]);
    expect(() => backends.register(directoryBackend(root))).toThrow(
      "a directory backend is already registered",
    );
    const { rows } = await h.db.query("select 1 from tenants");
    expect(rows).toEqual([]);
  });

  it("creates through the API: its own stack program, applied by the real engine, makes the sandbox", async () => {
    const created = await h.as("alice", "POST", "/projects", { name: "fourth", backend: "directory" });
    expect(created.statusCode, created.body).toBeOneOf([201, 202]);
    projectId = created.json().project_id;
    await h.waitForStatus("alice", projectId, "running", 120_000);
    const project = (await h.as("alice", "GET", `/projects/${projectId}`)).json();
    expect(project).toMatchObject({ backend: "directory", status: "running" });
    const paths = directoryPaths(root, projectId);
    expect(await fs.readFile(paths.state, "utf8")).toBe("running");
    expect(await checkpoint()).toEqual(
      expect.arrayContaining(["sandbox:host:Directory", "sandbox:host:File", "pulumi:pulumi:Stack"]),
    );
  });

  it("runs a command in the sandbox through exec, in its home", async () => {
    const result = await exec("echo made-here > note.txt && cat note.txt && pwd");
    expect(result.status, JSON.stringify(result.body)).toBe(200);
    expect(result.body).toMatchObject({
      exit_code: 0,
      stdout: `made-here\n${directoryPaths(root, projectId).home}\n`,
    });
    // Down behind the platform's back: the API names the sandbox as its backend calls it.
    const { state } = directoryPaths(root, projectId);
    await fs.writeFile(state, "crashed");
    try {
      const refused = await exec("true");
      expect(refused.status).toBe(409);
      expect(refused.body.message).toBe(
        `project ${projectId}'s sandbox is not running (its directory is down); start it first`,
      );
    } finally {
      await fs.writeFile(state, "running");
    }
  });

  it("attaches a terminal through the proxy, to the backend's own shell", async () => {
    const view = (await h.as("alice", "GET", `/projects/${projectId}`)).json();
    const terminal = connectTerminal(view.terminal_url);
    try {
      terminal.type("echo $((6 * 7))-from-the-terminal; cat note.txt\n");
      await terminal.waitFor("42-from-the-terminal");
      await terminal.waitFor("made-here");
    } finally {
      terminal.close();
    }
  });

  it("snapshots through the API: the backend's copy of the home, recorded, and listed", async () => {
    const asked = await h.as("alice", "POST", `/projects/${projectId}/snapshot`, {});
    expect(asked.statusCode, asked.body).toBe(202);
    const done = await settled("snapshot");
    expect(done.status).toBe("running");
    const listed = (await h.as("alice", "GET", `/projects/${projectId}/snapshots`)).json();
    expect(listed.snapshots).toHaveLength(1);
    const tag = listed.snapshots[0].tag as string;
    const copy = path.join(directoryPaths(root, projectId).snapshots, tag, "note.txt");
    expect(await fs.readFile(copy, "utf8")).toBe("made-here\n");
  });

  it("stops through the API: the final backup, then the stack says stopped, and exec is refused naming it", async () => {
    await exec("echo after-the-snapshot >> note.txt");
    const asked = await h.as("alice", "POST", `/projects/${projectId}/stop`, {});
    expect(asked.statusCode, asked.body).toBe(202);
    const done = await settled("stop");
    expect(done.status).toBe("stopped");
    const paths = directoryPaths(root, projectId);
    expect(await fs.readFile(paths.state, "utf8")).toBe("stopped");
    expect(await fs.readFile(path.join(paths.backup, "note.txt"), "utf8")).toBe(
      "made-here\nafter-the-snapshot\n",
    );
    const refused = await exec("true");
    expect(refused.status).toBe(409);
    expect(refused.body.message).toBe(`project ${projectId}'s sandbox is stopped; start it first`);
  });

  it("deletes through the API: the engine removes the sandbox, the backend its snapshots, the stack goes", async () => {
    const asked = await h.as("alice", "DELETE", `/projects/${projectId}`);
    expect(asked.statusCode, asked.body).toBe(202);
    await h.waitForStatus("alice", projectId, "gone", 120_000);
    const paths = directoryPaths(root, projectId);
    expect(existsSync(paths.sandbox)).toBe(false);
    expect(existsSync(paths.snapshots)).toBe(false);
    expect(await checkpoint()).toBeUndefined();
    expect(readdirSync(root).filter((name) => name !== ".snapshots")).toEqual([]);
    const { rows } = await h.db.query("select tag from snapshots where project_id = $1", [projectId]);
    expect(rows).toEqual([]);
  });
});
