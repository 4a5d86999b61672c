// The SSH waker (runtime/jobs/ssh-waker.ts) on PGlite, with the operations queue's own claim and finish
// playing the reconciler's worker, and a listener that answers as an sshd does playing the woken sandbox's
// (no stack runs here; real sandboxes, woken by OpenSSH's client: tests/integration/sbx-cli.test.ts). It holds
// a sleeping sandbox's port, wakes it only for a connection that begins as SSH does, gives the port back to
// every operation before it runs, and joins the held connection to the sshd once the sandbox runs.
import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { SshWaker } from "../../runtime/jobs/ssh-waker.js";
import { claimOperation, finishOperation, type Operation } from "../../runtime/store/operations.js";
import { setTenantState } from "../../runtime/store/tenants.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { IDLE_SHUTDOWN, wakeProject } from "../../runtime/tenants/wake.js";
import { StackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { freePort } from "../helpers/ports.js";
import { testDatabase } from "../helpers/postgres.js";

let h: ApiHarness<"alice">;
let dataDir: string;
let waker: SshWaker;

/** The worker's part: the next operation claimed and finished, and the tenant's state set as a run's is. */
async function work(): Promise<Operation> {
  const operation = await claimOperation(h.db, "worker", 60_000, "any");
  if (!operation) throw new Error("no operation to work on");
  await finishOperation(h.db, operation.id, "worker", { state: "succeeded" });
  const state = operation.kind === "stop" ? "stopped" : "running";
  await setTenantState(h.db, operation.project_id, state, null);
  return operation;
}

const portOf = async (id: string) =>
  (await h.db.query<{ ssh_port: number }>("select ssh_port from tenants where project_id = $1", [id]))
    .rows[0]!.ssh_port;

/** A project made, run, and put to sleep by the idle shutdown's stop. */
async function sleepingProject(): Promise<{ id: string; port: number }> {
  const made = await h.as("alice", "POST", "/projects", { name: `ssh-${Date.now()}` });
  expect(made.statusCode, made.body).toBe(202);
  await work();
  const id = (made.json() as { project_id: string }).project_id;
  await requestOperation(h.db, id, "stop", `${IDLE_SHUTDOWN}${id}-1`);
  await work();
  return { id, port: await portOf(id) };
}

/** A client that connects and says nothing: whether the port closes it before 5 s. */
function silentFor(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket: Socket = connect({ host: "127.0.0.1", port });
    const timer = setTimeout(() => (resolve("still open after 5 s"), socket.destroy()), 5_000);
    socket.on("error", () => undefined);
    socket.on("close", () => (clearTimeout(timer), resolve("closed by the waker")));
  });
}

/** What a port answers a client that sends `line`: the bytes until it closes or 1 s of silence. */
function exchange(port: number, line: string): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    const socket: Socket = connect({ host: "127.0.0.1", port }, () => socket.write(line));
    let timer = setTimeout(() => socket.destroy(), 1_000);
    socket.on("data", (chunk) => {
      got += chunk.toString();
      clearTimeout(timer);
      timer = setTimeout(() => socket.destroy(), 1_000);
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(got);
    });
  });
}

const listening = (server: Server, port: number) =>
  new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port, host: "0.0.0.0", exclusive: true }, () => resolve());
  });

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "ssh-waker-"));
  const first = await freePort();
  const config = StackConfig.parse({
    target: "local",
    host: { dataDir },
    tenants: { subnetPool: "10.97.0.0/16", sshPortRange: [first, first + 3] },
  });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: dataDir }),
    config,
    users: ["alice"],
    server: { projects: { defaults: { ...tenantDefaults(config), hostUsage: undefined } } },
  });
  waker = new SshWaker(h.db, {
    wake: (projectId, gone) => wakeProject(h.db, projectId, { timeoutMs: 30_000, gone }),
    refreshMs: 100,
    sshdWaitMs: 5_000,
    identificationWaitMs: 300,
  });
  waker.start();
}, 120_000);

afterAll(async () => {
  await waker?.stop();
  await h?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the SSH waker", () => {
  it("holds a sleeping sandbox's port; what is not SSH wakes nothing; an SSH client wakes it once and is joined to its sshd", async () => {
    const { id, port } = await sleepingProject();
    await waitFor("the waker on the port", 5_000, async () =>
      waker.holding().includes(id) ? true : undefined,
    );
    // A port scan or another protocol: closed, nothing queued.
    expect(await exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")).toBe("");
    expect(await exchange(port, "\x00\x01garbage")).toBe("");
    // Silence: closed by the waker once its wait for a first line is over (300 ms here, 10 s by default).
    expect(await silentFor(port)).toBe("closed by the waker");
    expect(
      (await h.db.query("select 1 from operations where project_id = $1 and kind = 'start'", [id])).rows
        .length,
    ).toBe(0);

    // An SSH client: it says its identification line first and waits for the server's.
    const answer = new Promise<string>((resolve) => {
      let got = "";
      const client = connect({ host: "127.0.0.1", port }, () => client.write("SSH-2.0-OpenSSH_test\r\n"));
      client.on("data", (chunk) => {
        got += chunk.toString();
        if (got.includes("echo:after\n")) {
          client.end();
          resolve(got);
        } else if (got.startsWith("SSH-2.0-sandbox\r\n")) client.write("after\n");
      });
      client.on("error", () => resolve(got));
    });
    // Its start is queued once, with the port given back before it runs.
    const start = await waitFor("the wake's start", 5_000, async () =>
      (
        await h.db.query<Operation>("select * from operations where project_id = $1 and kind = 'start'", [id])
      ).rows.at(0),
    );
    expect(start.idempotency_key).toMatch(/^wake-/);
    expect(waker.holding()).not.toContain(id);
    // The sandbox's sshd binds the port as the start does: it has the first line the client sent.
    const seen: string[] = [];
    const sshd = createServer((socket) => {
      socket.write("SSH-2.0-sandbox\r\n");
      socket.on("data", (chunk) => {
        for (const line of chunk.toString().split(/(?<=\n)/)) {
          seen.push(line);
          if (!line.startsWith("SSH-")) socket.write(`echo:${line}`);
        }
      });
    });
    await listening(sshd, port);
    await work();
    expect(await answer).toBe("SSH-2.0-sandbox\r\necho:after\n");
    expect(seen).toEqual(["SSH-2.0-OpenSSH_test\r\n", "after\n"]);
    expect(
      (await h.db.query("select 1 from operations where project_id = $1 and kind = 'start'", [id])).rows
        .length,
    ).toBe(1);
    // Running: never held again.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(waker.holding()).not.toContain(id);
    await new Promise<void>((resolve) => sshd.close(() => resolve()));
  });

  it("gives the port back to an operation at once, holds it not while any runs, and again once none does", async () => {
    const { id, port } = await sleepingProject();
    await waitFor("the waker on the port", 5_000, async () =>
      waker.holding().includes(id) ? true : undefined,
    );
    const giveBack = await waker.takeBack(id);
    // Free now: what the start binds.
    const sandbox = createServer();
    await listening(sandbox, port);
    await new Promise<void>((resolve) => sandbox.close(() => resolve()));
    // Refreshes while the operation runs leave it alone.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(waker.holding()).not.toContain(id);
    giveBack();
    await waitFor("the waker on the port again", 5_000, async () =>
      waker.holding().includes(id) ? true : undefined,
    );
    // A queued operation (a drift check) is one too: the port is the sandbox's until it has finished.
    await requestOperation(h.db, id, "check-drift");
    await waitFor("the port let go while the check is queued", 5_000, async () =>
      waker.holding().includes(id) ? undefined : true,
    );
    await claimOperation(h.db, "worker", 60_000, "any").then((o) =>
      finishOperation(h.db, o!.id, "worker", { state: "succeeded" }),
    );
    await waitFor("the waker on the port once it finished", 5_000, async () =>
      waker.holding().includes(id) ? true : undefined,
    );
  });
});
