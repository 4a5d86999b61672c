// Benchmark: GET /projects of the real runtime service on Postgres under load (autocannon), against the
// same service's cheapest answer (an unknown path: 404 without auth or database) at the same rate, in
// the same run. Prints figures; asserts nothing (npm run bench). Target (issue 4): p99 <= 10 ms at
// 500 requests/s on Postgres here.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import autocannon from "autocannon";
import { stringify } from "yaml";
import { openDatabase } from "../../runtime/store/db.js";
import { waitFor } from "../../lib/process.js";
import { migrate } from "../../runtime/store/migrations.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestCreateIn } from "../../runtime/tenants/service.js";
import { loadStackConfig } from "../../runtime/stack-file.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { StackConfig } from "../../stacks/config.js";
import { freePort } from "../helpers/host.js";
import { freshPostgresDatabase, testPostgresServerUrl } from "../helpers/postgres.js";
import { report } from "./report.js";
import { RUNTIME_ARGV } from "../../scripts/bundles.js";

const RATE = Number(process.env.BENCH_RATE ?? 500);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 15);
const USERS = 20;
const PROJECTS_PER_USER = 10;
const EVENTS_PER_OPERATION = 40;
const password = "correct horse battery staple";

const serverUrl = testPostgresServerUrl();
const database = await freshPostgresDatabase(serverUrl);
const { config: dev } = loadStackConfig();
const dir = mkdtempSync(path.join(os.tmpdir(), "bench-projects-"));
const apiPort = await freePort();
const config = StackConfig.parse({
  target: "local",
  host: { ...dev.host, dataDir: dir },
  runtime: {
    ...dev.runtime,
    apiPort,
    terminalPort: await freePort(),
    // Every user registers from this one address.
    rateLimits: { ...dev.runtime.rateLimits, register: { burst: USERS, perHour: 3600 } },
  },
});
const file = path.join(dir, "Pulumi.bench.yaml");
writeFileSync(
  file,
  stringify({
    config: {
      "agent-sandbox:target": "local",
      "agent-sandbox:host": config.host,
      "agent-sandbox:runtime": config.runtime,
    },
  }),
);

const base = `http://127.0.0.1:${apiPort}`;
const service = spawn(process.execPath, RUNTIME_ARGV, {
  cwd: REPO_ROOT,
  env: { ...process.env, AGENT_SANDBOX_CONFIG: file, DATABASE_URL: database.url },
  stdio: "ignore", // the JSON request logs are still written, as in production
});

/** Users with settled projects, each with a finished create and its engine events: what a listing reads. */
async function seed(): Promise<string[]> {
  const db = await openDatabase({ url: database.url, dataDir: dir });
  await migrate(db);
  const emails: string[] = [];
  for (let u = 0; u < USERS; u++) {
    const email = `bench-${u}@example.test`;
    emails.push(email);
    const registered = await fetch(`${base}/auth/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email, password }),
    });
    if (registered.status !== 201) throw new Error(`register: HTTP ${registered.status}`);
    const { rows } = await db.query<{ id: string }>("select id from users where email = $1", [email]);
    for (let p = 0; p < PROJECTS_PER_USER; p++) {
      const projectId = crypto.randomUUID();
      await db.transaction(async (tx) => {
        const { operation } = await requestCreateIn(tx, tenantDefaults(config), {
          projectId,
          ownerId: rows[0]!.id,
        });
        await tx.query("insert into projects (id, user_id, name, ssh_private_key) values ($1, $2, $3, $4)", [
          projectId,
          rows[0]!.id,
          `project ${p}`,
          "v1.not-used-by-the-listing",
        ]);
        // Settled, so the in-process reconciler has nothing to do while we measure.
        await tx.query("update operations set state = 'succeeded', finished_at = now() where id = $1", [
          operation.id,
        ]);
        await tx.query("update tenants set state = 'running' where project_id = $1", [projectId]);
        for (let seq = 1; seq <= EVENTS_PER_OPERATION; seq++)
          await tx.query("insert into operation_events (operation_id, seq, event) values ($1, $2, $3)", [
            operation.id,
            seq,
            JSON.stringify({ type: "resource", op: "create", status: "done", urn: `urn:${seq}` }),
          ]);
      });
    }
  }
  await db.close();
  return emails;
}

function load(url: string, token: string | undefined, rate: number | undefined) {
  return autocannon({
    url,
    connections: 10,
    duration: SECONDS,
    ...(rate ? { overallRate: rate } : {}),
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
}

try {
  await waitFor("runtime service", 60_000, () => fetch(`${base}/healthz`).then(() => true));
  const emails = await seed();
  const login = await fetch(`${base}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email: emails[0], password }),
  });
  const { access_token: token } = (await login.json()) as { access_token: string };
  const listing = (await (
    await fetch(`${base}/projects`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as { projects: unknown[] };
  if (listing.projects.length !== PROJECTS_PER_USER)
    throw new Error(`expected ${PROJECTS_PER_USER} projects, got ${listing.projects.length}`);

  await load(`${base}/projects`, token, RATE); // warm-up: JIT, pool connections, Postgres caches
  const floor = await load(`${base}/no-such-path`, undefined, RATE);
  const list = await load(`${base}/projects`, token, RATE);
  const open = await load(`${base}/projects`, token, undefined);

  const row = (name: string, r: autocannon.Result) =>
    `  ${name.padEnd(34)} p50 ${String(r.latency.p50).padStart(3)} ms  p99 ${String(r.latency.p99).padStart(3)} ms  max ${String(r.latency.max).padStart(4)} ms  ${Math.round(r.requests.average).toString().padStart(5)} req/s  non-2xx ${r.non2xx}  errors ${r.errors}`;
  console.log(
    `GET /projects: ${USERS} users x ${PROJECTS_PER_USER} projects (${EVENTS_PER_OPERATION} events each) on Postgres, ` +
      `${SECONDS} s per run, 10 connections, one runtime process (logging on) on loopback, ${os.cpus().length} cores`,
  );
  console.log(row(`baseline 404 @ ${RATE} req/s`, floor));
  console.log(row(`GET /projects @ ${RATE} req/s`, list));
  console.log(row("GET /projects, open throttle", open));
  console.log(
    `  ratio to baseline at ${RATE} req/s: p50 ${(list.latency.p50 / Math.max(floor.latency.p50, 1)).toFixed(1)}x, ` +
      `p99 ${(list.latency.p99 / Math.max(floor.latency.p99, 1)).toFixed(1)}x; ` +
      `target p99 <= 10 ms at 500 req/s: ${list.latency.p99 <= 10 && RATE >= 500 ? "met" : "NOT met"} ` +
      `(autocannon records whole milliseconds)`,
  );
  report("projects-list", [
    {
      figure: `GET /projects @ ${RATE} req/s (${PROJECTS_PER_USER} projects/user)`,
      unit: "ms",
      p50: list.latency.p50,
      tail: { label: "p99", value: list.latency.p99 },
      baseline: { label: `404 @ ${RATE} req/s`, p50: floor.latency.p50 },
      goal: "p99 ≤ 10 ms at 500 req/s",
    },
    {
      figure: "GET /projects, open throttle",
      unit: "req/s",
      p50: open.requests.average,
    },
  ]);
} finally {
  service.kill("SIGTERM");
  await new Promise((resolve) => service.once("exit", resolve));
  await database.drop();
  rmSync(dir, { recursive: true, force: true });
}
