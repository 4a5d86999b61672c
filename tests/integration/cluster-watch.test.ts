// The reconciler's watch on a running operation's cluster (runtime/reconciler/reconciler.ts, `watchCluster`),
// made certain: a backend of the test's own (the directory backend, tests/helpers/directory-backend.ts) whose
// "cluster" is a loopback server behind a relay the test cuts, and whose stack program never talks to it, so
// its engine cannot fail by itself when the cluster goes. Only the watch can end that engine. (The kubernetes
// provider's own cut test, kubernetes-provider.test.ts, meets both cases, whichever comes first.)
import { existsSync, promises as fs } from "node:fs";
import { connect, createServer, type Server } from "node:net";
import * as path from "node:path";
import * as command from "@pulumi/command";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostFile } from "../../components/resources/host-file.js";
import { waitFor } from "../../lib/process.js";
import type { SandboxBackend } from "../../runtime/backends/backend.js";
import { getOperation, operationEvents, type Operation } from "../../runtime/store/operations.js";
import { StackConfig } from "../../stacks/config.js";
import type { ApiHarness } from "../helpers/api.js";
import { directoryBackend, directoryPaths, harnessWithBackend } from "../helpers/directory-backend.js";
import { isolatedHostConfig } from "../helpers/host.js";
import { tcpRelay, type TcpRelay } from "../helpers/tcp-relay.js";

/** How long the program's one slow step takes: longer than the watch needs to see the cut twice (5 s apart). */
const SLOW_STEP_SECONDS = 30;

let h: ApiHarness<"alice">;
let config: StackConfig;
let root: string;
let api: Server;
let relay: TcpRelay;

/** Whether the relay (the backend's "cluster") accepts a connection within 2 s: why not, or undefined. */
const reach = (port: number) =>
  new Promise<string | undefined>((resolve) => {
    const socket = connect(port, "127.0.0.1");
    const done = (why: string | undefined) => {
      socket.destroy();
      resolve(why);
    };
    socket.setTimeout(2_000, () => done(`the remote's API 127.0.0.1:${port} is unreachable (timeout)`));
    socket.once("connect", () => done(undefined));
    socket.once("error", (error: NodeJS.ErrnoException) =>
      done(`the remote's API 127.0.0.1:${port} is unreachable (${error.code})`),
    );
  });

/**
 * The directory backend as a "remote" kind: its sandbox is made on this host by its own program, with one
 * slow step (a command) between its home and a last file; its cluster is the relay.
 */
function remoteBackend(base: SandboxBackend, relayPort: number): SandboxBackend {
  return {
    ...base,
    kind: "remote",
    admit: () => ({ backend: "remote" }),
    program: async (spec, options) => {
      const inner = await base.program(spec, options);
      return async () => {
        const outputs = (await inner()) as Record<string, unknown>;
        const slow = new command.local.Command("slow", { create: `sleep ${SLOW_STEP_SECONDS}` });
        const last = new HostFile(
          "last",
          { path: path.join(directoryPaths(root, spec.projectId).sandbox, "last"), content: "made" },
          { dependsOn: slow },
        );
        return { ...outputs, last: last.path };
      };
    },
    unreachable: () => reach(relayPort),
  };
}

beforeAll(async () => {
  api = createServer((socket) => socket.end());
  await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
  relay = await tcpRelay({ host: "127.0.0.1", port: (api.address() as { port: number }).port });
  const host = await isolatedHostConfig();
  root = path.join(path.dirname(host.configDir), "remote");
  config = StackConfig.parse({
    target: "local",
    host,
    tenants: { image: "no-image-needed", subnetPool: "10.225.4.0/24", sshPortRange: [29106, 29109] },
  });
  ({ h } = await harnessWithBackend(config, remoteBackend(directoryBackend(root), relay.port)));
}, 300_000);

afterAll(async () => {
  await h?.close();
  await relay?.close();
  api?.close();
  if (config) await fs.rm(path.dirname(config.host.configDir), { recursive: true, force: true });
}, 300_000);

describe("the reconciler's watch on a running operation's cluster", () => {
  it("a cluster gone mid-engine ends the engine after its step in flight, the operation waits for it and runs again once it answers", async () => {
    const created = await h.as("alice", "POST", "/projects", { name: "remote", backend: "remote" });
    expect(created.statusCode, created.body).toBe(202);
    const projectId: string = created.json().project_id;
    const { rows } = await h.db.query<Operation>(
      "select * from operations where project_id = $1 and kind = 'create'",
      [projectId],
    );
    const create = rows[0]!;
    const events = async () => (await operationEvents(h.db, create.id)).map(({ event }) => event);
    const last = path.join(directoryPaths(root, projectId).sandbox, "last");

    await waitFor("the slow step started", 120_000, async () =>
      (await events()).some(
        (e) => e.type === "resource" && e.resource === "command:local:Command" && e.status === "started",
      )
        ? true
        : undefined,
    );
    await relay.cut();
    try {
      const waiting = await waitFor("the create waiting for its cluster", 120_000, async () =>
        (await events()).find(
          (e) =>
            e.type === "diagnostic" && String(e.message).includes("the operation runs again once it answers"),
        ),
      ).catch(async (error: Error) => {
        throw new Error(`${error.message}; its events: ${JSON.stringify(await events()).slice(-4000)}`);
      });
      const all = await events();
      const ended = all.findIndex(
        (e) => e.type === "diagnostic" && String(e.message).includes("the engine's run is ended"),
      );
      expect(ended, JSON.stringify(all).slice(-4000)).toBeGreaterThanOrEqual(0);
      expect(all[ended]!.message).toBe(
        `the remote's API 127.0.0.1:${relay.port} is unreachable (ECONNREFUSED): the engine's run is ended, to wait for the cluster`,
      );
      expect(String(waiting.message)).toBe(
        `the remote's API 127.0.0.1:${relay.port} is unreachable (ECONNREFUSED); the operation runs again once it answers`,
      );
      // The engine finished the step it had begun and began no other: the last file is not there.
      expect(
        all.some(
          (e) =>
            e.type === "resource" &&
            e.resource === "sandbox:host:File" &&
            e.urn?.toString().endsWith("::last"),
        ),
      ).toBe(false);
      expect(existsSync(last)).toBe(false);
      // Still the first attempt, in flight with its lease.
      expect(await getOperation(h.db, create.id)).toMatchObject({ state: "running", attempt: 1 });
    } finally {
      await relay.restore();
    }

    const settled = await waitFor("the create settled", 300_000, async () => {
      const operation = await getOperation(h.db, create.id);
      return ["succeeded", "failed", "cancelled"].includes(operation!.state) ? operation : undefined;
    });
    expect(settled, settled!.error ?? "").toMatchObject({ state: "succeeded", attempt: 2 });
    expect(await fs.readFile(last, "utf8")).toBe("made");
    await h.waitForStatus("alice", projectId, "running", 60_000);

    expect((await h.as("alice", "DELETE", `/projects/${projectId}`)).statusCode).toBe(202);
    await waitFor("the project gone", 120_000, async () =>
      (await h.as("alice", "GET", `/projects/${projectId}`)).statusCode === 404 ? true : undefined,
    );
    expect(existsSync(directoryPaths(root, projectId).sandbox)).toBe(false);
  }, 600_000);
});
