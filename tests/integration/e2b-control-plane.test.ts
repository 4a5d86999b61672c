// E2B's control plane (runtime/api/e2b/) driven by E2B's own JavaScript SDK (`e2b` 2.51.0, unchanged)
// against a runtime listening on loopback, with a real reconciler making real sandboxes: create with
// metadata and envs, list with a metadata filter, getInfo, setTimeout, connect, kill; the timeout job
// deleting a sandbox past its timeout and pausing one asked to auto-pause, connect resuming it (three at once
// start it once), pause on request, and an exec, a file read and its owner's terminal waking it, and with autoResume its
// envd's traffic; a wrong key, another user's
// sandbox and an unknown template refused as the SDK expects; and each E2B sandbox an ordinary project of
// its owner's: its allowlist (changed through our own API) is what its SDK commands reach, they are in its
// exec audit, and its stack is checked for drift. Two sandboxes, one after the other (the file's pool holds one). Pages of a listing are shown
// in tests/unit/e2b-control.test.ts, on many recorded sandboxes.
import type { AddressInfo } from "node:net";
import { AuthenticationError, NotFoundError, Sandbox, SandboxError, type SandboxOpts } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { e2bTimeoutJob } from "../../runtime/jobs/e2b-timeout.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { RuntimeConfig } from "../../stacks/config.js";
import { tenantNames } from "../../components/tenant/names.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { connectTerminal } from "../helpers/terminal-client.js";
import { startWorld, WORLD_ADDRESS } from "../helpers/world.js";

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let jobs: JobScheduler;
let base: string;
const keys: Record<"alice" | "bob", string> = { alice: "", bob: "" };

/** The SDK's connection options: this runtime's control plane and envd, with `who`'s API key. */
const as = (who: "alice" | "bob" | { key: string }): SandboxOpts => ({
  apiKey: typeof who === "string" ? keys[who] : who.key,
  apiUrl: `${base}/e2b`,
  sandboxUrl: `${base}/e2b`,
  requestTimeoutMs: 120_000,
});

/** The envd access token the SDK holds for the sandbox (and sends as X-Access-Token). */
const tokenOf = (sandbox: Sandbox) => (sandbox as unknown as { envdAccessToken?: string }).envdAccessToken;

/** True once the SDK says the sandbox is not there (its NotFoundError); undefined while it is. */
const gone = (id: string) =>
  Sandbox.getInfo(id, as("alice")).then(
    () => undefined,
    (error: Error) => (error instanceof NotFoundError ? true : Promise.reject(error)),
  );

/** The ids of `who`'s projects as GET /projects lists them. */
const projectIds = async (who: "alice" | "bob") =>
  ((await h.as(who, "GET", "/projects")).json() as { projects: { project_id: string }[] }).projects.map(
    (p) => p.project_id,
  );

beforeAll(async () => {
  // Two names of "the internet" (tests/helpers/world.ts) the proxy resolves, one of which the sandbox's
  // allowlist will hold.
  platform = await testPlatform(
    { subnetPool: "10.217.0.0/24", sshPortRange: [29230, 29235] },
    { hosts: { "allowed-e2b.sandbox.test": WORLD_ADDRESS, "denied-e2b.sandbox.test": WORLD_ADDRESS } },
  );
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
    terminal: true,
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        e2b: { defaultTimeoutSeconds: 300, maxTimeoutSeconds: 3600, createWaitSeconds: 120 },
      },
    },
  });
  // The timeout job as runtime/main.ts starts it, on a short interval.
  jobs = new JobScheduler(h.db, [e2bTimeoutJob(h.db, 1000), driftSweepJob(h.db, 3_600_000)]);
  jobs.start();
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  for (const who of ["alice", "bob"] as const) {
    const made = await h.as(who, "POST", "/auth/api-keys", { name: "e2b sdk" });
    expect(made.statusCode, made.body).toBe(201);
    keys[who] = (made.json() as { key: string }).key;
  }
}, 600_000);

afterAll(async () => {
  await jobs?.stop();
  await h?.close();
  await platform?.stop();
}, 900_000);

describe("E2B's SDK against the control plane", () => {
  // One sandbox at a time: the file's pool holds one tenant's /24.
  let first: Sandbox;

  it("creates a sandbox with metadata and envs, a running project of its owner's", async () => {
    const before = await projectIds("alice");
    first = await Sandbox.create({
      ...as("alice"),
      metadata: { suite: "e2b", note: "a&b=c d%" },
      envs: { MODE: "test" },
      timeoutMs: 600_000,
    });
    expect(first.sandboxId).toMatch(/^[0-9a-f-]{36}$/);
    expect(tokenOf(first)).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // The same sandbox is a project in its owner's GET /projects, running, and in no one else's.
    expect(await projectIds("alice")).toEqual([...before, first.sandboxId]);
    expect(await h.statusOf("alice", first.sandboxId)).toBe("running");
    expect(await projectIds("bob")).not.toContain(first.sandboxId);
    // The envs are kept with the sandbox, for envd to apply to every command.
    const { rows } = await h.db.query<{ env_vars: Record<string, string>; template: string }>(
      "select env_vars, template from e2b_sandboxes where project_id = $1",
      [first.sandboxId],
    );
    expect(rows).toEqual([{ env_vars: { MODE: "test" }, template: "base" }]);
  }, 300_000);

  it("getInfo answers the template, metadata, state and the timeout as endAt", async () => {
    const info = await Sandbox.getInfo(first.sandboxId, as("alice"));
    expect(info).toMatchObject({
      sandboxId: first.sandboxId,
      templateId: "base",
      metadata: { suite: "e2b", note: "a&b=c d%" },
      state: "running",
      cpuCount: 1,
      lifecycle: { onTimeout: "kill", autoResume: false },
    });
    const left = info.endAt.getTime() - Date.now();
    expect(left).toBeGreaterThan(500_000);
    expect(left).toBeLessThanOrEqual(600_000);
  });

  it("lists the owner's sandboxes by metadata (as the SDK encodes it) and by state", async () => {
    const ids = async (query: NonNullable<Parameters<typeof Sandbox.list>[0]>["query"]) =>
      (await Sandbox.list({ ...as("alice"), query }).nextItems()).map((s) => s.sandboxId);
    expect(await ids({ metadata: { note: "a&b=c d%" } })).toEqual([first.sandboxId]);
    expect(await ids({ metadata: { suite: "e2b", note: "a&b=c d%" } })).toEqual([first.sandboxId]);
    expect(await ids({ metadata: { note: "a&b=c d" } })).toEqual([]);
    expect(await ids({ state: ["paused"] })).toEqual([]);
    expect(await ids({ state: ["running", "paused"] })).toEqual([first.sandboxId]);
    // Another user's listing holds none of them.
    expect((await Sandbox.list(as("bob")).nextItems()).map((s) => s.sandboxId)).toEqual([]);
  });

  it("setTimeout moves endAt; connect to a running sandbox extends it and hands out the same access token", async () => {
    await Sandbox.setTimeout(first.sandboxId, 900_000, as("alice"));
    const set = (await Sandbox.getInfo(first.sandboxId, as("alice"))).endAt.getTime() - Date.now();
    expect(set).toBeGreaterThan(800_000);
    expect(set).toBeLessThanOrEqual(900_000);
    const again = await Sandbox.connect(first.sandboxId, { ...as("alice"), timeoutMs: 1_200_000 });
    expect(again.sandboxId).toBe(first.sandboxId);
    expect(tokenOf(again)).toBe(tokenOf(first));
    expect((await again.getInfo()).endAt.getTime() - Date.now()).toBeGreaterThan(1_100_000);
    // A connect asking for less than is left never shortens it.
    await Sandbox.connect(first.sandboxId, { ...as("alice"), timeoutMs: 60_000 });
    expect((await first.getInfo()).endAt.getTime() - Date.now()).toBeGreaterThan(1_100_000);
  });

  it("is one project: its owner's terminal is a shell in it, its owner's API changes its allowlist, audits its SDK commands, checks its drift; its egress is that allowlist", async () => {
    const id = first.sandboxId;
    // Its owner's terminal (the console's) is a shell in the same sandbox: it sees what the SDK wrote.
    const written = `from-the-sdk-${Date.now()}`;
    await first.files.write("sdk-note.txt", written);
    const view = (await h.as("alice", "GET", `/projects/${id}`)).json() as { terminal_url: string };
    const terminal = connectTerminal(view.terminal_url);
    try {
      terminal.type('cat ~/sdk-note.txt; echo " as=$(whoami)"\n');
      // A first attach makes the tmux session through the engine's exec: beside a full run's microVMs it took
      // past the default 20 s once (session 58); the other suites' first attaches wait 30-60 s. Past 60 s
      // once (session 60: tmux had drawn its empty pane, no prompt): what the sandbox ran then is told.
      // The file has no newline, so both outputs share a line, and tmux may put a mode change it forwards from
      // the shell (readline's bracketed paste off, ESC[?2004l) between them when it redraws (session 62).
      const shown = new RegExp(`${written}(?:\\x1b\\[[?\\d;]*[A-Za-z])* as=agent`);
      await terminal.waitFor(shown, 60_000).catch(async (error: Error) => {
        const ps = await execIn(tenantNames(id).container, "ps -eo pid,ppid,stat,etime,time,args", "root");
        throw new Error(`${error.message}\nthe sandbox's processes:\n${ps.stdout}\n${ps.stderr}`);
      });
    } finally {
      terminal.close();
    }
    // The owner's own API narrows the sandbox's egress, as for any project (the allowlist in Squid, no restart).
    const patched = await h.as("alice", "PATCH", `/projects/${id}`, {
      allowlist: ["allowed-e2b.sandbox.test"],
    });
    expect(patched.statusCode, patched.body).toBe(202);
    await h.waitForStatus("alice", id, "running", 300_000);
    await waitFor("the allowlist's update", 300_000, async () => {
      const { rows } = await h.db.query<{ n: number }>(
        "select count(*)::int as n from operations where project_id = $1 and state in ('pending', 'running')",
        [id],
      );
      return rows[0]!.n === 0 ? true : undefined;
    });
    const sandbox = await Sandbox.connect(id, as("alice"));
    const status = async (url: string, extra = "") =>
      (
        await sandbox.commands.run(
          `curl -s -o /dev/null -w '%{http_code}' --max-time 5 ${extra} ${url} || true`,
        )
      ).stdout;
    // "The internet" only while it is asked (files that run beside this one take turns for it).
    const world = await startWorld();
    try {
      expect(await status("http://allowed-e2b.sandbox.test/")).toBe("200");
      // Not on the allowlist: the proxy refuses it; around the proxy, the sandbox's firewall drops it.
      expect(await status("http://denied-e2b.sandbox.test/")).toBe("403");
      expect(await status(`http://${WORLD_ADDRESS}/`, "--noproxy '*'")).toBe("000");
    } finally {
      await world.stop();
    }
    // The SDK's commands are in the project's exec audit, as the exec API's are.
    const audit = await h.as("alice", "GET", `/projects/${id}/execs`);
    expect(audit.statusCode, audit.body).toBe(200);
    const argvs = (audit.json() as { execs: { command: string[] }[] }).execs.map((e) => e.command.join(" "));
    expect(argvs.some((argv) => argv.includes("denied-e2b.sandbox.test"))).toBe(true);
    // Its stack is checked for drift by the sweep, like every tenant's, and its owner reads the record.
    await jobs.runNow("drift-sweep");
    await waitFor("the drift check", 300_000, async () => {
      const drift = (await h.as("alice", "GET", `/projects/${id}/drift`)).json() as { status: string };
      return drift.status === "clean" ? true : undefined;
    });
    expect((await h.as("bob", "GET", `/projects/${id}/drift`)).statusCode).toBe(404);
  }, 900_000);

  it("refuses a wrong key (AuthenticationError) and another user's sandbox (NotFound, kill false)", async () => {
    await expect(Sandbox.list(as({ key: "sbx_not-a-key" })).nextItems()).rejects.toThrow(AuthenticationError);
    await expect(Sandbox.create({ ...as({ key: "sbx_not-a-key" }) })).rejects.toThrow(AuthenticationError);
    await expect(Sandbox.getInfo(first.sandboxId, as("bob"))).rejects.toThrow(NotFoundError);
    await expect(Sandbox.connect(first.sandboxId, as("bob"))).rejects.toThrow(NotFoundError);
    await expect(Sandbox.setTimeout(first.sandboxId, 1000, as("bob"))).rejects.toThrow(NotFoundError);
    expect(await Sandbox.kill(first.sandboxId, as("bob"))).toBe(false);
    expect(await h.statusOf("alice", first.sandboxId)).toBe("running");
  });

  it("refuses an unknown template naming it and the templates there are, and makes nothing", async () => {
    const before = await projectIds("alice");
    const refused = Sandbox.create("no-such-template", as("alice"));
    await expect(refused).rejects.toThrow(SandboxError);
    await expect(refused).rejects.toThrow(
      /400: template "no-such-template" is not on this platform.*\bbase\b/,
    );
    await expect(Sandbox.create({ ...as("alice"), timeoutMs: 7_200_000 })).rejects.toThrow(
      /timeout: must be at most 3600 seconds/,
    );
    expect(await projectIds("alice")).toEqual(before);
  });

  it("answers errors in E2B's form, {code, message}, for bad input too", async () => {
    const post = (path: string, body: string) =>
      fetch(`${base}/e2b${path}`, {
        method: "POST",
        headers: { "x-api-key": keys.alice, "content-type": "application/json" },
        body,
      });
    const malformed = await post("/v2/sandboxes", "{");
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toEqual({ code: 400, message: expect.any(String) });
    const unknown = await post("/sandboxes/not-a-sandbox/timeout", JSON.stringify({ timeout: 10 }));
    expect(await unknown.json()).toEqual({ code: 404, message: "sandbox not-a-sandbox not found" });
    const network = await post("/v2/sandboxes", JSON.stringify({ templateID: "base", network: {} }));
    expect(await network.json()).toEqual({
      code: 400,
      message: expect.stringMatching(/network: not supported/),
    });
    // Auto-resume without a pause to resume from: refused naming the field (the SDK refuses it too).
    const resume = await post(
      "/v2/sandboxes",
      JSON.stringify({ templateID: "base", autoResume: { enabled: true } }),
    );
    expect(await resume.json()).toEqual({
      code: 400,
      message: expect.stringMatching(/autoResume: can be enabled only with autoPause/),
    });
  });

  it("deletes a sandbox past its timeout (the timeout job): gone for the SDK, its project deleted", async () => {
    await Sandbox.setTimeout(first.sandboxId, 1000, as("alice"));
    await waitFor("the timed-out sandbox gone for the SDK", 60_000, () => gone(first.sandboxId));
    expect(await Sandbox.kill(first.sandboxId, as("alice"))).toBe(false);
    await h.waitForStatus("alice", first.sandboxId, "gone", 300_000);
  }, 400_000);

  it("pauses a sandbox asked to auto-pause at its timeout; connect resumes it with its home; pause on request; an exec, a file read or its owner's terminal wakes it; kill deletes it", async () => {
    const paused = await Sandbox.create({ ...as("alice"), lifecycle: { onTimeout: "pause" } });
    const id = paused.sandboxId;
    await paused.files.write("kept.txt", "written before the pause\n");
    await Sandbox.setTimeout(id, 1000, as("alice"));
    await waitFor("the sandbox paused at its timeout", 120_000, async () =>
      (await paused.getInfo()).state === "paused" ? true : undefined,
    );
    await h.waitForStatus("alice", id, "stopped", 300_000);
    const listed = await Sandbox.list({ ...as("alice"), query: { state: ["paused"] } }).nextItems();
    expect(listed.map((s) => s.sandboxId)).toEqual([id]);
    // Its envd answers nothing while it is paused.
    await expect(paused.commands.run("true")).rejects.toThrow(/not running/);

    // Three connects at once: one start (keyed by the stop it undoes), each answered once the sandbox runs.
    const starts = async () =>
      (
        await h.db.query<{ n: number }>(
          "select count(*)::int as n from operations where project_id = $1 and kind = 'start'",
          [id],
        )
      ).rows[0]!.n;
    const startsBefore = await starts();
    const resumed = await Promise.all(
      [1, 2, 3].map(() => Sandbox.connect(id, { ...as("alice"), timeoutMs: 600_000 })),
    );
    expect(await starts()).toBe(startsBefore + 1);
    expect(new Set(resumed.map(tokenOf))).toEqual(new Set([tokenOf(paused)]));
    expect((await resumed[0]!.getInfo()).state).toBe("running");
    // The timeout runs from the resume, not from the timeout that paused it.
    expect((await resumed[0]!.getInfo()).endAt.getTime() - Date.now()).toBeGreaterThan(500_000);
    const after = await resumed[0]!.commands.run("cat ~/kept.txt");
    expect(after.stdout).toBe("written before the pause\n");

    // Pause on request (E2B's pause): true, then false (already paused); the home is kept, its processes end.
    await resumed[0]!.commands.run("echo again >> ~/kept.txt");
    expect(await resumed[0]!.pause()).toBe(true);
    expect((await Sandbox.getInfo(id, as("alice"))).state).toBe("paused");
    expect(await Sandbox.pause(id, as("alice"))).toBe(false);
    expect((await h.as("alice", "GET", `/projects/${id}`)).json().status).toBe("stopped");

    // A paused sandbox is woken by an exec of its project (our own API): the request is held, not refused.
    const exec = await h.as("alice", "POST", `/projects/${id}/exec`, {
      command: ["cat", "/home/agent/kept.txt"],
    });
    expect(exec.statusCode, exec.body).toBe(200);
    expect(exec.json()).toMatchObject({ exit_code: 0, stdout: "written before the pause\nagain\n" });
    expect(await starts()).toBe(startsBefore + 2);
    expect((await Sandbox.getInfo(id, as("alice"))).state).toBe("running");
    // And by a read of its files.
    expect(await Sandbox.pause(id, as("alice"))).toBe(true);
    const read = await h.as("alice", "GET", `/projects/${id}/files/content?path=/home/agent/kept.txt`);
    expect(read.statusCode, read.body).toBe(200);
    expect(read.body).toBe("written before the pause\nagain\n");
    expect(await starts()).toBe(startsBefore + 3);
    // And by its owner's terminal: told in it while the sandbox starts, then a shell in it.
    expect(await Sandbox.pause(id, as("alice"))).toBe(true);
    const view = (await h.as("alice", "GET", `/projects/${id}`)).json() as { terminal_url: string };
    const terminal = connectTerminal(view.terminal_url);
    try {
      await terminal.waitFor("waking the sandbox...");
      terminal.type('echo "lines=$(wc -l < ~/kept.txt)"\n');
      await terminal.waitFor("lines=2");
    } finally {
      terminal.close();
    }
    expect(await starts()).toBe(startsBefore + 4);

    // A stop its owner asked for stays a stop: an exec is refused naming it (connect, a resume, would start it).
    expect((await h.as("alice", "POST", `/projects/${id}/stop`)).statusCode).toBe(202);
    await h.waitForStatus("alice", id, "stopped", 300_000);
    const refused = await h.as("alice", "POST", `/projects/${id}/exec`, { command: ["true"] });
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.json()).toMatchObject({ error: "sandbox_not_running", details: { status: "stopped" } });
    expect(await starts()).toBe(startsBefore + 4);

    expect(await paused.kill()).toBe(true);
    expect(await paused.kill()).toBe(false);
    await expect(paused.getInfo()).rejects.toThrow(NotFoundError);
    await h.waitForStatus("alice", id, "gone", 300_000);
  }, 900_000);

  it("auto-resume: a paused sandbox asked for it is woken by its envd's traffic, from its kept home", async () => {
    const sandbox = await Sandbox.create({
      ...as("alice"),
      lifecycle: { onTimeout: "pause", autoResume: true },
    });
    try {
      expect((await sandbox.getInfo()).lifecycle).toEqual({ onTimeout: "pause", autoResume: true });
      await sandbox.files.write("kept.txt", "kept\n");
      expect(await sandbox.pause()).toBe(true);
      expect((await sandbox.getInfo()).state).toBe("paused");
      // The SDK's next command is held while the sandbox starts, then runs there.
      const ran = await sandbox.commands.run("cat ~/kept.txt");
      expect(ran.stdout).toBe("kept\n");
      expect((await sandbox.getInfo()).state).toBe("running");
    } finally {
      await sandbox.kill();
    }
  }, 600_000);
});
