// The platform the fault loops run against (issue 18): the runtime as `npm run local` runs it (its own
// process, the in-process reconciler, the shared `sandbox` provider as its child), on a database of the
// loop's own, with a client that talks to it over HTTP as a user would. The runtime can be killed with
// SIGKILL and started again on the same stack file, ports and data directory; the provider plugin it runs
// can be found and killed; and what is left on the host is counted with the platform's own orphan sweep.
import { mkdirSync, readFileSync, readdirSync } from "node:fs";
import * as path from "node:path";
import { dockerClient } from "../../lib/docker-client.js";
import { processAlive, waitFor } from "../../lib/process.js";
import type { Database } from "../../runtime/store/db.js";
import { getOperation, type Operation } from "../../runtime/store/operations.js";
import { snapshotOptions } from "../../runtime/tenants/config.js";
import { orphanSweepOptions, sweepOrphans, type Orphan } from "../../runtime/tenants/orphans.js";
import type { TenantsConfig } from "../../stacks/config.js";
import { PASSWORD, startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { docker } from "../helpers/containers.js";
import { freePort, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";

export interface ChaosPlatformOptions {
  /** The tenants' pool and SSH ports (of the caller's own), and the backup interval. */
  readonly tenants: Pick<TenantsConfig, "subnetPool" | "sshPortRange"> & Partial<TenantsConfig>;
  /** Where the runtime's logs go (one file per start). */
  readonly logDir: string;
  /** Names the platform's Squid resolves (name → address), for names that only exist in the test's network. */
  readonly hosts?: Record<string, string>;
  /** How often the runtime's host watchdog looks at Squid and the registry (the platform's default: 10 s). */
  readonly hostWatchdogSeconds?: number;
}

export interface ApiAnswer {
  readonly status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the API's JSON, read field by field
  readonly body: any;
}

/** A process's parent, from /proc (undefined when it is gone). */
function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return undefined;
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {
    return "";
  }
}

/** Every process below `pid`, with its command line. */
export function descendantsOf(pid: number): { pid: number; command: string }[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const parent = parentOf(Number(entry));
    if (parent !== undefined) children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
  }
  const found: { pid: number; command: string }[] = [];
  const walk = (p: number) => {
    for (const child of children.get(p) ?? []) {
      found.push({ pid: child, command: commandOf(child) });
      walk(child);
    }
  };
  walk(pid);
  return found;
}

export const alive = processAlive;

export interface ChaosPlatform {
  readonly platform: TestPlatform;
  readonly database: TestDatabase;
  /** The loop's own connection to the runtime's database (operations are read here, never written). */
  readonly db: Database;
  runtime: RuntimeProcess;
  /** Starts counted from 1; the log of start n is runtime-n.log. */
  readonly starts: number;
  /** A request as the loop's user; a 401 (expired token) logs in again once. */
  api(method: string, url: string, body?: unknown): Promise<ApiAnswer>;
  /** SIGKILL of the runtime process; resolves once it has exited. Its children are returned as they were. */
  killRuntime(): Promise<{ pid: number; command: string }[]>;
  /** The runtime again, on the same stack file, ports, data directory and database. */
  restartRuntime(): Promise<void>;
  /** The shared provider plugin the runtime runs now (its child), if any. */
  providerPid(): number | undefined;
  /** The Pulumi engine (the CLI running an update, destroy or refresh for the runtime) now, if any. */
  enginePid(): number | undefined;
  /** Waits until `operationId` has finished, whichever way. */
  settled(operationId: string, timeoutMs?: number): Promise<Operation>;
  /** The platform's own orphan sweep of this instance, judging everything (no grace period), removing nothing. */
  orphans(): Promise<Orphan[]>;
  stop(): Promise<void>;
}

/** The Pulumi CLI as the Automation API runs it for an operation (`pulumi up --yes ... --stack tenant-...`). */
const ENGINE = /(^|\/)pulumi (up|destroy|refresh|preview) /;

/** Needs TEST_DATABASE_URL (a Postgres server): the loop reads operations beside the runtime. */
export async function chaosPlatform(options: ChaosPlatformOptions): Promise<ChaosPlatform> {
  mkdirSync(options.logDir, { recursive: true });
  const platform = await testPlatform(options.tenants, { registry: "own", hosts: options.hosts });
  let database: TestDatabase | undefined;
  try {
    // The first push into a fresh registry carries the base image's layers (20-50 s here, against 1-3 s
    // for a snapshot after it): pushed once now, so every snapshot's kill window is a warm one's.
    const warm = `${snapshotOptions(platform.config).repository}/warm-up:base`;
    await docker("tag", platform.config.tenants.image, warm);
    await docker("push", warm);
    await docker("rmi", warm);
    database = await testDatabase("postgres", { under: platform.config.host.dataDir });
  } catch (error) {
    await platform.stop();
    throw error;
  }
  const { host, tenants } = platform.config;
  const runtimeKeys = {
    apiPort: await freePort(),
    terminalPort: await freePort(),
    createWaitSeconds: 0,
    projectQuota: 1000,
    rateLimits: { createProject: { burst: 1000, perHour: 100_000 } },
    jobs: {
      idleCheckSeconds: 3600,
      driftSweepMinutes: 1440,
      ...(options.hostWatchdogSeconds !== undefined
        ? { hostWatchdogSeconds: options.hostWatchdogSeconds }
        : {}),
    },
  };
  let starts = 0;
  const start = () =>
    startRuntime(
      "chaos",
      { host, tenants },
      {
        databaseUrl: database!.url,
        logFile: path.join(options.logDir, `runtime-${++starts}.log`),
        runtime: runtimeKeys,
      },
    );
  let token = "";
  const email = `chaos-${Date.now()}@example.test`;
  const raw = async (method: string, url: string, body?: unknown): Promise<ApiAnswer> => {
    const response = await fetch(`${chaos.runtime.base}${url}`, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  const login = async () => {
    const answer = await raw("POST", "/auth/login", { email, password: PASSWORD });
    if (answer.status !== 200) throw new Error(`login: ${answer.status} ${JSON.stringify(answer.body)}`);
    token = answer.body.access_token;
  };
  const chaos: ChaosPlatform = {
    platform,
    database,
    db: database.db,
    runtime: undefined as unknown as RuntimeProcess,
    get starts() {
      return starts;
    },
    async api(method, url, body) {
      const answer = await raw(method, url, body);
      if (answer.status !== 401) return answer;
      await login();
      return raw(method, url, body);
    },
    async killRuntime() {
      const child = chaos.runtime.child;
      const before = descendantsOf(child.pid!);
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGKILL");
      await exited;
      return before;
    },
    async restartRuntime() {
      chaos.runtime = await start();
    },
    providerPid() {
      return descendantsOf(chaos.runtime.child.pid!).find((p) =>
        p.command.includes("dist/plugins/sandbox.mjs"),
      )?.pid;
    },
    enginePid() {
      return descendantsOf(chaos.runtime.child.pid!).find((p) => ENGINE.test(p.command))?.pid;
    },
    settled(operationId, timeoutMs = 300_000) {
      return waitFor(`operation ${operationId} to finish`, timeoutMs, async () => {
        const operation = await getOperation(database!.db, operationId);
        return operation && ["succeeded", "failed", "cancelled"].includes(operation.state)
          ? operation
          : undefined;
      });
    },
    async orphans() {
      const report = await sweepOrphans(
        orphanSweepOptions(chaos.runtime.config, dockerClient(), { graceSeconds: 0, db: database!.db }),
      );
      return report.orphans;
    },
    async stop() {
      await chaos.runtime?.stop().catch(() => undefined);
      await database?.close().catch(() => undefined);
      await platform.stop();
    },
  };
  try {
    chaos.runtime = await start();
    const registered = await raw("POST", "/auth/register", { email, password: PASSWORD });
    if (registered.status !== 201)
      throw new Error(`register: ${registered.status} ${JSON.stringify(registered.body)}`);
    await login();
  } catch (error) {
    await chaos.stop();
    throw error;
  }
  return chaos;
}
