// E2B's SDK given E2B_DOMAIN and E2B_API_KEY alone (docs/e2b.md, "On a domain"): a real runtime, reconciler
// and sandbox behind the GCP host's public front door (a real Caddy with the config the startup script writes,
// Caddy's own CA in Let's Encrypt's place, a loopback port standing in for 443). The SDK runs in a process of
// its own (tests/helpers/e2b_domain_sdk.mjs) that trusts that CA, as an HTTPS client trusts a public one, and
// resolves the domain's names to this machine (tests/helpers/resolve-to-loopback.mjs), as DNS would.
import { execFile } from "node:child_process";
import { mkdtempSync, promises as fs, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { connect as tlsConnect } from "node:tls";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { caddyFrontDoor, stopCaddy, type CaddyOptions } from "../../lib/host/caddy.js";
import { frontDoorHost } from "../../lib/front-door.js";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { freePort, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

const execFileAsync = promisify(execFile);
/** The runtime's front-door domain on the local target (runtime/tenants/config.ts): the one it answers for. */
const DOMAIN = "sandbox.localhost";
const dir = mkdtempSync(path.join(tmpdir(), "e2b-domain-"));
const storageDir = path.join(dir, "caddy-storage");
const rootCa = path.join(storageDir, "pki/authorities/local/root.crt");

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let front: CaddyOptions;
/** Each step the SDK's process printed, by name. */
const steps = new Map<string, Record<string, unknown>>();
let sdkOutput = "";
/** Caddy's root certificate, once it made one. */
let rootCaPem = "";

const step = (name: string) => {
  const found = steps.get(name);
  if (!found)
    throw new Error(`the SDK's process did not reach '${name}'; it wrote:\n${sdkOutput.slice(-4000)}`);
  return found;
};

/** Whether the front door completes a handshake for `servername` with a certificate its CA signed. */
function certified(servername: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tlsConnect(
      { host: "127.0.0.1", port: front.port, servername, ca: rootCaPem, rejectUnauthorized: false },
      () => {
        resolve(socket.authorized);
        socket.end();
      },
    );
    socket.on("error", () => resolve(false));
  });
}

beforeAll(async () => {
  platform = await testPlatform({ subnetPool: "10.220.0.0/24", sshPortRange: [29256, 29259] });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    // Its own poll once an hour: every create and delete below is claimed at once only because the request
    // that queued it wakes this process's reconciler (operationsQueued, runtime/store/operations.ts).
    reconciler: { pollMs: 3_600_000 },
  });
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  const api = `127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  front = {
    port: await freePort(),
    // The admin port the platform's tenant stacks register their dev-server routes at.
    adminPort: platform.config.host.frontDoorAdminPort,
    configDir: path.join(dir, "etc"),
    logDir: path.join(dir, "log"),
    runDir: path.join(dir, "run"),
    public: {
      domain: DOMAIN,
      httpPort: await freePort(),
      apiUpstream: api,
      terminalUpstream: api,
      issuer: { module: "internal" },
      storageDir,
    },
  };
  const check = await caddyFrontDoor(front).ensure(() => undefined);
  expect(check.ready, check.detail).toBe(true);
  rootCaPem = await waitFor("Caddy's root certificate", 30_000, async () =>
    fs.readFile(rootCa, "utf8").catch(() => undefined),
  );
  await waitFor(`the certificate of api.${DOMAIN}`, 30_000, async () =>
    (await certified(`api.${DOMAIN}`)) ? true : undefined,
  );

  const key = (
    (await h.as("alice", "POST", "/auth/api-keys", { name: "e2b on a domain" })).json() as { key: string }
  ).key;
  const outcome = await execFileAsync(
    process.execPath,
    [
      "--import",
      path.join(REPO_ROOT, "tests/helpers/resolve-to-loopback.mjs"),
      path.join(REPO_ROOT, "tests/helpers/e2b_domain_sdk.mjs"),
    ],
    {
      cwd: REPO_ROOT,
      timeout: 600_000,
      // Only what a user sets: the domain (with the port standing in for 443) and a key. No E2B_API_URL or
      // E2B_SANDBOX_URL: the SDK forms every URL from the domain.
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        E2B_DOMAIN: `${DOMAIN}:${front.port}`,
        E2B_API_KEY: key,
        NODE_EXTRA_CA_CERTS: rootCa,
        RESOLVE_TO_LOOPBACK: DOMAIN,
        RUN_ID: `domain-${Date.now()}`,
      },
    },
  ).catch((error: { stdout?: string; stderr?: string; message: string }) => ({
    stdout: error.stdout ?? "",
    stderr: `${error.stderr ?? ""}\n${error.message}`,
  }));
  sdkOutput = `${outcome.stdout}\n${outcome.stderr}`;
  for (const line of outcome.stdout.split("\n").filter((l) => l.startsWith("{"))) {
    const parsed = JSON.parse(line) as { step: string } & Record<string, unknown>;
    steps.set(parsed.step, parsed);
  }
}, 900_000);

afterAll(async () => {
  await stopCaddy(front).catch(() => undefined);
  await h?.close();
  await platform?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 900_000);

describe("E2B's SDK with E2B_DOMAIN alone, through the public front door", () => {
  it("creates at https://api.<domain> and reaches envd at https://49983-<id>.<domain>, with certificates for both", async () => {
    const { id, envdApiUrl, host3000 } = step("created") as Record<string, string>;
    expect(envdApiUrl).toBe(`https://49983-${id}.${DOMAIN}:${front.port}`);
    expect(host3000).toBe(`3000-${id}.${DOMAIN}:${front.port}`);
    // The sandbox is an ordinary project of the key's owner.
    const project = await h.as("alice", "GET", `/projects/${id}`);
    expect(project.statusCode, project.body).toBe(200);
  });

  it("runs commands as the agent user in its home; a failing one is the SDK's CommandExitError", () => {
    expect(step("command")).toMatchObject({ stdout: "hello-42\nagent\n/home/agent\n", exitCode: 0 });
    expect(step("failing command")).toEqual({
      step: "failing command",
      error: "CommandExitError",
      exitCode: 3,
    });
  });

  it("getHost(port): another port of the sandbox, for its owner only, through a one-time session URL on that host", () => {
    const id = step("created").id as string;
    expect(step("port")).toEqual({
      step: "port",
      anonymous: 404,
      session: 200,
      sessionHost: `3000-${id}.${DOMAIN}`,
      redeemed: 302,
      page: "served-by-the-sandbox\n",
      injected: { status: 200, page: "served-by-the-sandbox\n" },
    });
  });

  it("writes and reads files, lists by metadata, connects again and kills", () => {
    expect(step("file")).toMatchObject({ text: "written through envd on the domain", exists: true });
    expect(step("list").ids).toEqual([step("created").id]);
    expect(step("connect").stdout).toBe("written through envd on the domain");
    expect(step("killed").killed).toBe(true);
  });

  it("a certificate only for a name the runtime serves: a killed sandbox's envd host, another port, another name are refused", async () => {
    const id = step("created").id as string;
    await h.waitForStatus("alice", id, "gone", 300_000);
    const ask = (domain: string) =>
      h.as("alice", "GET", `/front-door/tls-ask?domain=${encodeURIComponent(domain)}`);
    expect((await ask(`49983-${id}.${DOMAIN}`)).statusCode).toBe(404);
    expect((await ask(`3000-${id}.${DOMAIN}`)).statusCode).toBe(404);
    expect((await ask(`0-${id}.${DOMAIN}`)).statusCode).toBe(404);
    expect((await ask(`api.${DOMAIN}`)).statusCode).toBe(200);
    expect((await ask(`49983-${id}.example.test`)).statusCode).toBe(404);
    const malformed = await h.as("alice", "GET", "/front-door/tls-ask");
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().message).toMatch(/domain/);
    // A sandbox id nobody made: Caddy asks, the runtime says no, the handshake fails.
    expect(await certified(`49983-00000000-0000-4000-8000-000000000000.${DOMAIN}`)).toBe(false);
  });

  it("a delete asked while the create runs waits behind it, and runs as soon as the create ends (no poll)", async () => {
    const created = await h.as(
      "alice",
      "POST",
      "/projects",
      { name: "short-lived" },
      { prefer: "respond-async" },
    );
    expect(created.statusCode, created.body).toBe(202);
    const id = created.json().project_id as string;
    // Queued behind the create (one operation per stack at a time): only the slot the create frees claims it.
    expect((await h.as("alice", "DELETE", `/projects/${id}`)).statusCode).toBe(202);
    await h.waitForStatus("alice", id, "gone", 300_000);
  });

  it("a declared dev-server route's names are served while it is declared (a certificate at the first handshake), its other ports' are not", async () => {
    const created = await h.as(
      "alice",
      "POST",
      "/projects",
      { name: "routes", ports: [{ port: 3000 }] },
      {
        prefer: "respond-async",
      },
    );
    expect(created.statusCode, created.body).toBe(202);
    const id = created.json().project_id as string;
    const short = frontDoorHost(id, undefined, DOMAIN);
    const ask = async (domain: string) =>
      (await h.as("alice", "GET", `/front-door/tls-ask?domain=${encodeURIComponent(domain)}`)).statusCode;
    expect(await ask(short)).toBe(200);
    expect(await ask(`p3000-${short}`)).toBe(200);
    expect(await ask(`p3001-${short}`)).toBe(404);
    expect(await ask(`${short.split(".")[0]}-feature.${DOMAIN}`)).toBe(404);
    await h.waitForStatus("alice", id, "running", 300_000);
    // The tenant stack's route is in this front door: its name gets a certificate at its first handshake.
    expect(await certified(short)).toBe(true);
    expect((await h.as("alice", "DELETE", `/projects/${id}`)).statusCode).toBe(202);
    await h.waitForStatus("alice", id, "gone", 300_000);
    expect(await ask(short)).toBe(404);
  });
});
