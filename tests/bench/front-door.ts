// Benchmark (issue 45, seed 004 SC-006: "the dev server proxy adds less than 10 ms"): a GET of a dev
// server's page in a real sandbox, 300 times one after another on a kept-alive connection, three ways in the
// same run: straight to the sandbox's address from the host (the baseline), through the front door's
// declared route (Caddy, the runtime's forward-auth), and through the route of a server found by itself
// (Caddy, the runtime's forward-auth reading the sandbox's sockets on the host). Prints figures; asserts
// nothing (npm run bench).
import { Agent, request } from "node:http";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { apiHarness } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { ms, percentile, report, type Figure } from "./report.js";

const ROUNDS = Number(process.env.BENCH_FRONT_DOOR_ROUNDS ?? 300);
const PAGE = "hello from the dev server of the benchmark";

/** One GET on a kept-alive agent: the status, the body, the milliseconds. */
function get(agent: Agent, connect: string, port: number, host: string, cookie?: string, pathname = "/") {
  return new Promise<{ status: number; body: string; ms: number }>((resolve, reject) => {
    const started = performance.now();
    const req = request(
      { host: connect, port, path: pathname, agent, headers: { host, ...(cookie ? { cookie } : {}) } },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body, ms: performance.now() - started }));
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/** The cookie a one-time session URL sets (its 302's Set-Cookie), on that URL's own host. */
async function cookieOf(url: string, frontDoorPort: number): Promise<string> {
  const { host, pathname, search } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port: frontDoorPort, path: pathname + search, headers: { host } },
      (res) => {
        res.resume();
        const set = res.headers["set-cookie"]?.[0];
        if (res.statusCode !== 302 || !set) reject(new Error(`session answered ${res.statusCode}`));
        else resolve(set.split(";")[0]!);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

const platform = await testPlatform(
  { subnetPool: "10.247.4.0/23", sshPortRange: [29180, 29183] },
  { frontDoor: true },
);
const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "bench-front-door-"));
const h = await apiHarness({
  database: await testDatabase("pglite", { under: dataDir }),
  config: platform.config,
  users: ["alice"],
  reconciler: true,
});
try {
  await h.app.listen({ port: platform.config.runtime.apiPort, host: "127.0.0.1" });
  const created = await h.as("alice", "POST", "/projects", {
    name: "bench-front-door",
    ports: [{ port: 3000 }],
  });
  if (created.statusCode >= 300) throw new Error(created.body);
  const id: string = created.json().project_id;
  await h.waitForStatus("alice", id, "running");
  const serving = await h.as("alice", "POST", `/projects/${id}/exec`, {
    command: `mkdir -p /tmp/www && echo '${PAGE}' > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 3000`,
    background: true,
  });
  if (serving.statusCode !== 202) throw new Error(`the dev server did not start: ${serving.body}`);
  await waitFor("the dev server", 30_000, async () =>
    (
      await execIn(tenantNames(id).container, "curl --noproxy '*' -s -m 2 http://127.0.0.1:3000/")
    ).stdout.includes(PAGE)
      ? true
      : undefined,
  );
  const subnet = (
    await h.db.query<{ subnet: string }>("select subnet from tenants where project_id = $1", [id])
  ).rows[0]!.subnet;
  const address = tenantAddresses(subnet).sandbox;
  const frontDoorPort = platform.config.host.frontDoorPort;

  const declared = (await h.as("alice", "POST", `/projects/${id}/front-door/session`, {})).json();
  const found = (await h.as("alice", "POST", `/projects/${id}/dev-servers/session`, { port: 3000 })).json();
  const ways = [
    {
      what: "straight to the sandbox",
      port: 3000,
      connect: address,
      host: `${address}:3000`,
      cookie: undefined,
    },
    {
      what: "through a declared route",
      port: frontDoorPort,
      connect: "127.0.0.1",
      host: new URL(declared.front_door_url).host,
      cookie: await cookieOf(declared.url, frontDoorPort),
    },
    {
      what: "through a found server's route",
      port: frontDoorPort,
      connect: "127.0.0.1",
      host: new URL(found.front_door_url).host,
      cookie: await cookieOf(found.url, frontDoorPort),
    },
  ];
  // The runtime's forward-auth alone, as Caddy asks it for each (what each route adds besides Caddy's).
  const apiPort = platform.config.runtime.apiPort;
  const auths = [
    { what: "the declared route's forward-auth", path: `/front-door/auth/${id}`, cookie: ways[1]!.cookie },
    {
      what: "the found server's forward-auth",
      path: `/front-door/dev/auth?host=${new URL(found.front_door_url).hostname}`,
      cookie: ways[2]!.cookie,
    },
  ];
  const authSamples = new Map(auths.map((auth) => [auth.what, [] as number[]]));
  const authAgent = new Agent({ keepAlive: true, maxSockets: 1 });
  const samples = new Map<string, number[]>();
  for (const way of ways) samples.set(way.what, []);
  const agents = new Map(ways.map((way) => [way.what, new Agent({ keepAlive: true, maxSockets: 1 })]));
  // Interleaved rounds, so a slow moment of the machine falls on each way alike; the first of each warms up.
  for (let round = 0; round <= ROUNDS; round += 1) {
    for (const way of ways) {
      const answer = await get(agents.get(way.what)!, way.connect, way.port, way.host, way.cookie);
      if (answer.status !== 200 || !answer.body.includes(PAGE))
        throw new Error(`${way.what}: ${answer.status} ${answer.body.slice(0, 200)}`);
      if (round > 0) samples.get(way.what)!.push(answer.ms);
    }
    for (const auth of auths) {
      const answer = await get(
        authAgent,
        "127.0.0.1",
        apiPort,
        `127.0.0.1:${apiPort}`,
        auth.cookie,
        auth.path,
      );
      if (answer.status !== 200)
        throw new Error(`${auth.what}: ${answer.status} ${answer.body.slice(0, 200)}`);
      if (round > 0) authSamples.get(auth.what)!.push(answer.ms);
    }
  }
  const base = percentile(samples.get(ways[0]!.what)!, 50);
  const figures: Figure[] = [];
  console.log(`${ROUNDS} GETs each, one after another, kept-alive connections:`);
  for (const way of ways) {
    const values = samples.get(way.what)!;
    const p50 = percentile(values, 50);
    const p99 = percentile(values, 99);
    console.log(
      `  ${way.what.padEnd(32)} p50 ${ms(p50)}   p99 ${ms(p99)}   ${way === ways[0] ? "" : `overhead p50 ${ms(p50 - base)}   ratio ${(p50 / base).toFixed(2)}x`}`,
    );
    if (way === ways[0]) continue;
    figures.push({
      figure: `a dev server's page ${way.what} (SC-006: the overhead over the baseline)`,
      unit: "ms",
      p50,
      tail: { label: "p99", value: p99 },
      baseline: { label: "straight to the sandbox's address", p50: base },
      goal: "overhead ≤ 10 ms",
      samples: values.length,
    });
  }
  for (const [what, values] of authSamples)
    console.log(`  ${what.padEnd(32)} p50 ${ms(percentile(values, 50))}   p99 ${ms(percentile(values, 99))}`);
  for (const agent of [...agents.values(), authAgent]) agent.destroy();
  report("front-door", figures);
} finally {
  await h.close();
  await platform.stop();
  await fs.rm(dataDir, { recursive: true, force: true });
}
