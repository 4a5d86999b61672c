// The API harness. In process: the server as the runtime builds it (auth with the test key, the project
// routes), the reconciler and the terminal proxy as runtime/main.ts wires them, and registered users with
// their tokens. As a process (`npm run local`): its stack file, the runtime itself, and the clean-up of
// whatever tenant stacks it left behind.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { FastifyInstance, LightMyRequestResponse } from "fastify";
import { stringify } from "yaml";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import type { Database } from "../../runtime/store/db.js";
import { getOperation, type Operation } from "../../runtime/store/operations.js";
import { Reconciler, type ReconcilerOptions } from "../../runtime/reconciler/reconciler.js";
import { SecretBox } from "../../runtime/secrets.js";
import { buildServer, type ServerOptions } from "../../runtime/server.js";
import { dockerAttacher } from "../../runtime/terminal/attach.js";
import { TerminalProxy, type TerminalProxyOptions } from "../../runtime/terminal/proxy.js";
import { recordingsDir } from "../../runtime/terminal/recording.js";
import { TicketIssuer } from "../../runtime/terminal/tickets.js";
import { reconcilerOptions } from "../../runtime/reconciler/options.js";
import { tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { projectSecretValues } from "../../runtime/tenants/project-secrets.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { destroyTenant, TENANT_PROJECT } from "../../runtime/tenants/stack.js";
import { WAKE_WAIT_MS, wakeProject } from "../../runtime/tenants/wake.js";
import { SshWaker, type SshWakerOptions } from "../../runtime/jobs/ssh-waker.js";
import type { z } from "zod";
import { StackConfig, TenantsConfig, type HostConfig } from "../../stacks/config.js";
import { freePort, testPlatform, type TestPlatform } from "./host.js";
import { testDatabase, type TestDatabase } from "./postgres.js";
import { RUNTIME_ARGV } from "../../scripts/bundles.js";

/** The key the tests' servers sign access tokens (and terminal tickets) with. */
export const TEST_SECRET = new TextEncoder().encode("a-test-signing-key-that-is-at-least-32-bytes");
export const PASSWORD = "correct horse battery staple";
/** A harness user's email (each harness has a database of its own). */
export const emailOf = (who: string): string => `${who}@example.test`;

export type ApiServerOptions = Partial<Omit<ServerOptions, "projects">> & {
  readonly db: Database;
  /** Whose tenant defaults and data directory (the SecretBox's key) the project routes use. */
  readonly config?: StackConfig;
  /** TEST_SECRET unless given. */
  readonly secret?: Uint8Array;
  /** Over the project routes' own: `docker` (none unless given: a route that reached it would fail). */
  readonly projects?: Partial<NonNullable<ServerOptions["projects"]>>;
};

/**
 * The runtime's server on `db`, quiet, with the test key. Without `config` no request may create a
 * project (the tenant defaults are absent); building it does no I/O.
 */
export function apiServer({ db, config, secret = TEST_SECRET, projects, ...options }: ApiServerOptions) {
  return buildServer({
    prerequisites: [],
    logger: false,
    auth: new Auth(db, { ...DEFAULT_AUTH, secret }),
    // Without a config nothing reaches a sandbox, and a turn is never recorded: the routes are there all the same.
    agent: {
      recordingsDir: config
        ? recordingsDir(config.host.dataDir)
        : path.join(os.tmpdir(), "unused-recordings"),
    },
    ...options,
    projects: {
      db,
      defaults: config ? tenantDefaults(config) : ({} as never),
      secrets: config ? SecretBox.fromDataDir(config.host.dataDir) : new SecretBox(Buffer.alloc(32)),
      publicHost: "127.0.0.1",
      docker: {} as never,
      ...projects,
    },
  });
}

/** A started reconciler as runtime/main.ts makes it from `config`, polling fast; `overrides` win. */
export function testReconciler(
  db: Database,
  config: StackConfig,
  overrides: Partial<ReconcilerOptions> = {},
): Reconciler {
  const reconciler = new Reconciler({
    db,
    ...reconcilerOptions(config),
    pollMs: 200,
    ...overrides,
  });
  reconciler.start();
  return reconciler;
}

/** Waits until `operation` has finished (whichever way), and when. */
export function settledOperation(
  db: Database,
  operation: Operation,
  timeoutMs = 240_000,
): Promise<Operation & { finished: number }> {
  return waitFor(`operation ${operation.kind} of ${operation.project_id}`, timeoutMs, async () => {
    const current = await getOperation(db, operation.id);
    return current && ["succeeded", "failed", "cancelled"].includes(current.state)
      ? { ...current, finished: Date.now() }
      : undefined;
  });
}

/** Asks the reconciler to delete every tenant not yet deleted, and waits until it has (or gives up). */
export async function deleteAllTenants(db: Database, timeoutMs = 600_000): Promise<void> {
  const { rows } = await db.query<{ project_id: string }>(
    "select project_id from tenants where state <> 'deleted'",
  );
  for (const { project_id } of rows) await requestOperation(db, project_id, "delete").catch(() => undefined);
  /** What is left, with each project's three newest operations. */
  const left = async () =>
    (
      await db.query<{ project_id: string; state: string; operations: string | null }>(
        `select t.project_id, t.state,
           (select string_agg(o.kind || ':' || o.state || coalesce(' (' || left(o.error, 300) || ')', ''), ', ' order by o.seq desc)
              from (select * from operations where project_id = t.project_id order by seq desc limit 3) o) as operations
         from tenants t where t.state <> 'deleted'`,
      )
    ).rows;
  const describe = (tenants: Awaited<ReturnType<typeof left>>) =>
    tenants
      .map((t) => `${t.project_id} (${t.state}; newest operations: ${t.operations ?? "none"})`)
      .join("; ");
  // A failed delete ends the wait at once, and neither it nor the deadline fails the caller: said loudly (with
  // what each project is doing) for the file's own leftover checks to judge. It used to wait out the whole
  // deadline in silence (a full run once lost 10 minutes here).
  const outcome = await waitFor("every project deleted", timeoutMs, async () => {
    const tenants = await left();
    if (tenants.length === 0) return "deleted";
    const failed = tenants.filter((t) => t.operations?.startsWith("delete:failed"));
    return failed.length > 0 ? `a delete failed: ${describe(failed)}` : undefined;
  }).catch(async () => `not all deleted after ${timeoutMs / 1000} s: ${describe(await left())}`);
  if (outcome !== "deleted") console.error(`deleteAllTenants: ${outcome}`);
}

export interface ApiHarnessOptions<U extends string> {
  /** The harness closes it last. */
  readonly database: TestDatabase;
  readonly config?: StackConfig;
  /** Registered and logged in, in this order, as `emailOf(name)`. */
  readonly users?: readonly U[];
  /** A reconciler (needs `config`): `true`, or options over testReconciler's. */
  readonly reconciler?: boolean | Partial<ReconcilerOptions>;
  /** A terminal proxy on a free port (needs `config`), its URL in the projects' `terminal_url`. */
  readonly terminal?: boolean | Partial<TerminalProxyOptions>;
  /** The SSH waker on sleeping sandboxes' ports (needs a reconciler, which takes the ports back from it). */
  readonly sshWaker?: boolean | Partial<SshWakerOptions>;
  /** Anything else the server takes. */
  readonly server?: Omit<ApiServerOptions, "db" | "config">;
}

export interface HarnessUser {
  readonly email: string;
  readonly id: string;
  readonly token: string;
  readonly refreshToken: string;
}

export interface ApiHarness<U extends string> {
  readonly app: FastifyInstance;
  readonly db: Database;
  readonly users: Record<U, HarnessUser>;
  /** Replace it to change its options (after stopping it); close() stops the one here. */
  reconciler: Reconciler | undefined;
  readonly sshWaker: SshWaker | undefined;
  readonly proxy: TerminalProxy | undefined;
  /** Where the proxy records sessions, and whose project directories the reconciler deletes. */
  readonly recordingsDir: string | undefined;
  /** A request as `who` (with their access token; `nobody` sends none). */
  as(
    who: U | "nobody",
    method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE",
    url: string,
    payload?: object,
    headers?: Record<string, string>,
  ): Promise<LightMyRequestResponse>;
  login(who: U): Promise<{ access_token: string; refresh_token: string }>;
  /**
   * Logs every user in again, for a test that reads `users[who].token` itself late in a long file (`as`
   * renews a token about to expire on its own).
   */
  renewTokens(): Promise<void>;
  /** The project's status as its owner sees it; `gone` once it answers 404. */
  statusOf(who: U, projectId: string): Promise<string>;
  waitForStatus(who: U, projectId: string, status: string, timeoutMs?: number): Promise<void>;
  /** Deletes the tenants left (when a reconciler runs), then stops proxy, reconciler, server, database. */
  close(): Promise<void>;
}

/** Whether the access token `jwt` expires within `seconds` (its `exp` claim; a token without one never does). */
function expiresWithin(jwt: string, seconds: number): boolean {
  const payload = jwt.split(".")[1];
  if (!payload) return false;
  const { exp } = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { exp?: number };
  return exp !== undefined && exp - Date.now() / 1000 < seconds;
}

export async function apiHarness<const U extends string = never>(
  options: ApiHarnessOptions<U>,
): Promise<ApiHarness<U>> {
  const { database, config } = options;
  const { db } = database;
  if ((options.reconciler || options.terminal) && !config)
    throw new Error("apiHarness: a reconciler or a terminal proxy needs a config");
  const secret = options.server?.secret ?? TEST_SECRET;
  const recordings = config && recordingsDir(config.host.dataDir);
  let proxy: TerminalProxy | undefined;
  let app: FastifyInstance | undefined;
  if (options.sshWaker && !options.reconciler)
    throw new Error("apiHarness: the SSH waker needs a reconciler");
  const sshWaker = options.sshWaker
    ? new SshWaker(db, {
        wake: (projectId, gone) => wakeProject(db, projectId, { timeoutMs: WAKE_WAIT_MS, gone }),
        refreshMs: 250,
        ...(options.sshWaker === true ? {} : options.sshWaker),
      })
    : undefined;
  /** The project as its owner sees it: its status (`gone` once it answers 404) and the whole answer. */
  const view = async (who: U, projectId: string) => {
    const response = await harness.as(who, "GET", `/projects/${projectId}`);
    const status = response.statusCode === 404 ? "gone" : (response.json() as { status: string }).status;
    return { status, body: response.body };
  };
  const renew = async (who: U) => {
    const { access_token, refresh_token } = await harness.login(who);
    harness.users[who] = { ...harness.users[who], token: access_token, refreshToken: refresh_token };
  };
  const harness: ApiHarness<U> = {
    get app() {
      return app!;
    },
    db,
    users: {} as Record<U, HarnessUser>,
    reconciler: undefined,
    sshWaker,
    get proxy() {
      return proxy;
    },
    recordingsDir: recordings,
    async as(who, method, url, payload, headers = {}) {
      // A file can run longer than an access token lives (15 minutes): a token about to expire is
      // replaced by a fresh login first, as a client would refresh it. Tests of expiry build their own.
      if (who !== "nobody" && expiresWithin(harness.users[who].token, 60)) await renew(who);
      return app!.inject({
        method,
        url,
        payload,
        headers: {
          ...headers,
          ...(who === "nobody" ? {} : { authorization: `Bearer ${harness.users[who].token}` }),
        },
      });
    },
    async login(who) {
      const response = await app!.inject({
        method: "POST",
        url: "/auth/login",
        payload: { email: emailOf(who), password: PASSWORD },
      });
      if (response.statusCode !== 200)
        throw new Error(`login of ${who}: ${response.statusCode} ${response.body}`);
      return response.json();
    },
    async renewTokens() {
      for (const who of Object.keys(harness.users) as U[]) await renew(who);
    },
    statusOf: async (who, projectId) => (await view(who, projectId)).status,
    async waitForStatus(who, projectId, status, timeoutMs = 300_000) {
      // An error ends the wait at once (a probe's throw would only be retried until the deadline); a deadline
      // says where the project stood and what its newest operations did, for a CI log to be read alone.
      let last = "(never answered)";
      const outcome = await waitFor(`project ${projectId} to be ${status}`, timeoutMs, async () => {
        const current = await view(who, projectId);
        last = current.body;
        if (current.status === "error" && status !== "error") return "error";
        return current.status === status ? "reached" : undefined;
      }).catch(() => "deadline");
      if (outcome === "reached") return;
      const { rows } = await db.query<{ kind: string; state: string; error: string | null }>(
        "select kind, state, left(error, 600) as error from operations where project_id = $1 order by seq desc limit 3",
        [projectId],
      );
      const operations = rows.map((o) => `${o.kind}:${o.state}${o.error ? ` (${o.error})` : ""}`).join(", ");
      throw new Error(
        `project ${projectId} ${outcome === "error" ? "failed" : `not ${status} after ${timeoutMs / 1000} s`}: ${last}; newest operations: ${operations || "none"}`,
      );
    },
    async close() {
      if (harness.reconciler) await deleteAllTenants(db);
      await sshWaker?.stop();
      await proxy?.close();
      await harness.reconciler?.stop();
      await app?.close();
      await database.close();
    },
  };
  try {
    let terminal: { urlBase: string; tickets: TicketIssuer } | undefined;
    if (options.terminal) {
      const tickets = new TicketIssuer(secret);
      const secretBox = SecretBox.fromDataDir(config!.host.dataDir);
      proxy = new TerminalProxy({
        db,
        tickets,
        attacher: dockerAttacher(dockerClient()),
        recordingsDir: recordings!,
        secretValues: (projectId) => projectSecretValues(db, secretBox, projectId),
        wake: (projectId, gone) => wakeProject(db, projectId, { timeoutMs: WAKE_WAIT_MS, gone }),
        ...(options.terminal === true ? {} : options.terminal),
      });
      const port = await proxy.listen(await freePort(), "127.0.0.1");
      terminal = { urlBase: `ws://127.0.0.1:${port}/terminal`, tickets };
    }
    app = apiServer({
      db,
      config,
      ...options.server,
      // Sandboxes exist only where a reconciler runs: then backup-status asks the real engine.
      projects: {
        ...(options.reconciler ? { docker: dockerClient() } : {}),
        ...(terminal ? { terminal } : {}),
        ...options.server?.projects,
      },
    });
    if (options.reconciler)
      harness.reconciler = testReconciler(db, config!, {
        ...(sshWaker ? { sleepingPorts: sshWaker } : {}),
        ...(options.reconciler === true ? {} : options.reconciler),
      });
    sshWaker?.start();
    for (const who of options.users ?? []) {
      const email = emailOf(who);
      const registered = await app.inject({
        method: "POST",
        url: "/auth/register",
        payload: { email, password: PASSWORD },
      });
      if (registered.statusCode !== 201)
        throw new Error(`registering ${who}: ${registered.statusCode} ${registered.body}`);
      const { access_token, refresh_token } = await harness.login(who);
      harness.users[who] = {
        email,
        id: registered.json().user_id,
        token: access_token,
        refreshToken: refresh_token,
      };
    }
  } catch (error) {
    await harness.close().catch(() => undefined);
    throw error;
  }
  return harness;
}

/**
 * A test platform on `tenants`' subnet pool and SSH ports (the file's own), and a runtime on it with a
 * reconciler and the user alice, listening on loopback at `base`: what a file of real sandboxes reached over
 * HTTP starts from. The caller closes `h`, then stops `platform`.
 */
export async function sandboxRuntime(
  tenants: Partial<TenantsConfig>,
): Promise<{ platform: TestPlatform; h: ApiHarness<"alice">; base: string }> {
  const platform = await testPlatform(tenants);
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  await h.app.listen({ port: 0, host: "127.0.0.1" });
  return { platform, h, base: `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}` };
}

/**
 * Writes `sections` (target, host, runtime, tenants...) as the stack file `Pulumi.<name>.yaml` beside the
 * host's directories, each under `agent-sandbox:`; returns its path.
 */
export async function writeStackFile(
  host: HostConfig,
  name: string,
  sections: Record<string, unknown>,
): Promise<string> {
  const file = path.join(path.dirname(host.configDir), `Pulumi.${name}.yaml`);
  const config = Object.fromEntries(
    Object.entries(sections).map(([key, value]) => [`agent-sandbox:${key}`, value]),
  );
  await fs.writeFile(file, stringify({ config }));
  return file;
}

export interface RuntimeProcess {
  /** The stack file's config, as the runtime reads it. */
  readonly config: StackConfig;
  readonly child: ChildProcess;
  /** `http://127.0.0.1:<apiPort>` */
  readonly base: string;
  /** SIGTERM and the wait for its exit; then, so that a failed run leaves no sandbox, the leftover stacks go. */
  stop(): Promise<void>;
}

/**
 * The runtime as `npm run local` runs it, on its own stack file `Pulumi.<name>.yaml` (the local target on
 * `host` with `tenants`, API and terminal on free loopback ports, and any other `runtime` keys) and on
 * `databaseUrl` (PGlite in the host's data directory without one); its output to `logFile` or nowhere. Resolves once it answers /healthz; if it
 * exits instead, the error says so. Failing, it is stopped.
 */
export async function startRuntime(
  name: string,
  // As a config file holds it: what has a default may be left out (`warmPool.settleSeconds`).
  { host, tenants }: { host: HostConfig; tenants: Partial<z.input<typeof TenantsConfig>> },
  options: {
    databaseUrl?: string;
    logFile?: string;
    runtime?: Record<string, unknown>;
    /** Node.js's arguments: the bundle as `npm run local` starts it unless a bench compares another way. */
    argv?: readonly string[];
  } = {},
): Promise<RuntimeProcess> {
  const runtime = {
    apiPort: await freePort(),
    terminalPort: await freePort(),
    listenHost: "127.0.0.1",
    publicHost: "127.0.0.1",
    ...options.runtime,
  };
  const sections = { target: "local", host, runtime, tenants };
  const config = StackConfig.parse(sections);
  const configFile = await writeStackFile(host, name, sections);
  const log = options.logFile ? openSync(options.logFile, "w") : "ignore";
  const child = spawn(process.execPath, options.argv ?? RUNTIME_ARGV, {
    cwd: REPO_ROOT,
    env: { ...process.env, AGENT_SANDBOX_CONFIG: configFile, DATABASE_URL: options.databaseUrl ?? "" },
    stdio: ["ignore", log, log],
  });
  if (typeof log === "number") closeSync(log); // the child has its own copy
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const service: RuntimeProcess = {
    config,
    child,
    base: `http://127.0.0.1:${runtime.apiPort}`,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      await destroyLeftoverTenants(config);
    },
  };
  try {
    await waitFor("the runtime service", 60_000, async () => {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(
          `the runtime exited (${child.exitCode ?? child.signalCode})${options.logFile ? `; see ${options.logFile}` : ""}`,
        );
      return fetch(`${service.base}/healthz`).then(() => true);
    });
  } catch (error) {
    await service.stop();
    throw error;
  }
  return service;
}

/** Destroys whatever tenant stacks `config`'s state still holds. */
async function destroyLeftoverTenants(config: StackConfig): Promise<void> {
  const options = tenantStackOptions(config);
  const stateDir = path.join(config.host.dataDir, "state", ".pulumi", "stacks", TENANT_PROJECT);
  for (const file of await fs.readdir(stateDir).catch(() => [] as string[])) {
    const match = /^tenant-(.+)\.json$/.exec(file);
    if (match) await destroyTenant(match[1]!, options).catch(() => undefined);
  }
}
