// The front door (issue 16 US4) end to end: the runtime (API + forward-auth on a real port), the
// reconciler and the tenant stacks with their FrontDoorRoute resources, the test platform's own Caddy, a
// real sandbox whose dev server (python3 -m http.server) listens on 3000, and curl from the host.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { caddyAdmin, caddyPaths } from "../../lib/host/caddy.js";
import { frontDoorHost } from "../../lib/front-door.js";
import { waitFor } from "../../lib/process.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { IDLE_SHUTDOWN } from "../../runtime/tenants/wake.js";
import { apiHarness, settledOperation, type ApiHarness } from "../helpers/api.js";
import { docker, execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { curl } from "../helpers/curl.js";

const run = promisify(execFile);
const PAGE = "hello from the dev server on 3000";

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
const ids = { alice: "", bob: "" };
let jars: string;

const frontDoorUrl = (who: "alice" | "bob", name?: string) =>
  `http://${frontDoorHost(ids[who], name)}:${platform.config.host.frontDoorPort}/`;

/** Asks for a one-time session URL as `who` and opens it with curl, keeping the cookie in `who`'s jar. */
async function login(who: "alice" | "bob") {
  const session = await h.as(who, "POST", `/projects/${ids[who]}/front-door/session`, {});
  expect(session.statusCode, session.body).toBe(200);
  const jar = path.join(jars, who);
  const opened = await curl(session.json().url, "-L", "-c", jar, "-b", jar);
  return { session: session.json(), opened, jar };
}

/** The cookie's value as curl keeps it (the last field of the jar's line). */
async function cookieValue(jar: string): Promise<string> {
  const line = (await fs.readFile(jar, "utf8")).split("\n").find((l) => l.includes("sbx_front_door"));
  return line!.split("\t").at(-1)!;
}

async function startDevServer(who: "alice" | "bob") {
  const started = await h.as(who, "POST", `/projects/${ids[who]}/exec`, {
    command: `mkdir -p /tmp/www && echo '${PAGE}' > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 3000`,
    background: true,
  });
  expect(started.statusCode, started.body).toBe(202);
  await waitFor("the dev server", 30_000, async () =>
    (await execIn(tenantNames(ids[who]).container, "curl -s -m 2 http://127.0.0.1:3000/")).stdout.includes(
      PAGE,
    )
      ? true
      : undefined,
  );
}

const sandboxAddress = async (who: "alice" | "bob") =>
  tenantAddresses(
    (await h.db.query<{ subnet: string }>("select subnet from tenants where project_id = $1", [ids[who]]))
      .rows[0]!.subnet,
  ).sandbox;

beforeAll(async () => {
  jars = await fs.mkdtemp(path.join(os.tmpdir(), "front-door-jars-"));
  platform = await testPlatform(
    { subnetPool: "10.250.0.0/23", sshPortRange: [28040, 28045] },
    { frontDoor: true },
  );
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  // Caddy's forward-auth asks the runtime over TCP, at the port the tenant specs name.
  await h.app.listen({ port: platform.config.runtime.apiPort, host: "127.0.0.1" });
  for (const who of ["alice", "bob"] as const) {
    const created = await h.as(who, "POST", "/projects", {
      name: `front-door-${who}`,
      ports: [{ port: 3000 }],
    });
    expect(created.statusCode, created.body).toBeLessThan(300);
    ids[who] = created.json().project_id;
  }
  await Promise.all((["alice", "bob"] as const).map((who) => h.waitForStatus(who, ids[who], "running")));
  await Promise.all((["alice", "bob"] as const).map(startDevServer));
}, 240_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
  await fs.rm(jars, { recursive: true, force: true });
}, 240_000);

describe("the front door", () => {
  it("shows the declared port's URL, and serves the dev server's page to its owner only", async () => {
    const project = (await h.as("alice", "GET", `/projects/${ids.alice}`)).json();
    expect(project.front_door).toEqual([{ name: null, port: 3000, url: frontDoorUrl("alice") }]);

    const { session, opened, jar } = await login("alice");
    expect(session.front_door_url).toBe(frontDoorUrl("alice"));
    expect(opened).toEqual({ status: 200, body: `${PAGE}\n` });
    // The cookie is HttpOnly and scoped to this project's host alone (no Domain attribute).
    const line = (await fs.readFile(jar, "utf8")).split("\n").find((l) => l.includes("sbx_front_door"))!;
    expect(line.startsWith(`#HttpOnly_${frontDoorHost(ids.alice, undefined)}\tFALSE`)).toBe(true);
    expect(await curl(frontDoorUrl("alice"), "-b", jar)).toEqual({ status: 200, body: `${PAGE}\n` });

    // No cookie, a made-up one, a used ticket: 404, as for a project that does not exist.
    expect((await curl(frontDoorUrl("alice"))).status).toBe(404);
    expect((await curl(frontDoorUrl("alice"), "-H", "Cookie: sbx_front_door=forged.value")).status).toBe(404);
    expect((await curl(session.url)).status).toBe(404);

    // Another user: no session for alice's project, and bob's own cookie does not open alice's host.
    expect((await h.as("bob", "POST", `/projects/${ids.alice}/front-door/session`, {})).statusCode).toBe(404);
    const bob = await login("bob");
    expect(bob.opened).toEqual({ status: 200, body: `${PAGE}\n` });
    const bobsCookie = await cookieValue(bob.jar);
    const asBob = await curl(frontDoorUrl("alice"), "-H", `Cookie: sbx_front_door=${bobsCookie}`);
    expect(asBob.status).toBe(404);
    expect(asBob.body).not.toContain(PAGE);
  });

  it("answers 404 for a port the project did not declare, and PATCH refuses a bad port naming it", async () => {
    // Something listens on 3001 inside, but no route leads there: every other host name is the catch-all.
    await h.as("alice", "POST", `/projects/${ids.alice}/exec`, {
      command: "cd /tmp/www && exec python3 -m http.server 3001",
      background: true,
    });
    const jar = path.join(jars, "alice");
    expect((await curl(frontDoorUrl("alice", "p3001"), "-b", jar)).status).toBe(404);
    for (const [ports, field] of [
      [[{ port: 2222 }], "ports.0.port"],
      [[{ port: 3000 }, { port: 80 }], "ports.1.port"],
      [[{ port: 3000 }, { port: 3000 }], "ports.1"],
      [[{ port: 3000, name: "Bad_Name" }], "ports.0.name"],
    ] as const) {
      const answer = await h.as("alice", "PATCH", `/projects/${ids.alice}`, { ports });
      expect(answer.statusCode, answer.body).toBe(400);
      expect(answer.json().details.map((d: { field: string }) => d.field)).toContain(field);
    }
    expect((await h.as("alice", "GET", `/projects/${ids.alice}`)).json().front_door).toHaveLength(1);
  });

  it("lets only the front door reach the port: not another tenant's sandbox, not a container off the bridge", async () => {
    const address = await sandboxAddress("alice");
    // The host's own processes reach it over the bridge (locally generated traffic: Caddy is one).
    expect((await curl(`http://${address}:3000/`)).body).toBe(`${PAGE}\n`);
    // bob's sandbox: its bridge's packets are dropped before they leave it.
    // (directly, not through the sandbox's proxy, which would answer for Squid instead)
    const fromBob = await execIn(
      tenantNames(ids.bob).container,
      `curl --noproxy '*' -s -m 3 http://${address}:3000/; echo "exit=$?"`,
    );
    expect(fromBob.stdout).toMatch(/exit=(7|28)/);
    expect(fromBob.stdout).not.toContain(PAGE);
    // A container on the engine's default bridge (forwarded traffic, as from outside the host): dropped.
    const image = platform.config.tenants.image;
    const outside = await docker(
      "run",
      "--rm",
      "--entrypoint",
      "sh",
      image,
      "-c",
      `curl -s -m 3 http://${address}:3000/; echo "exit=$?"`,
    );
    expect(outside).toMatch(/exit=(7|28)/);
    expect(outside).not.toContain(PAGE);
  });

  it("a route deleted in Caddy behind the platform's back is found by a drift check and put back", async () => {
    const routeId = `fd-${ids.alice}-main-3000`;
    const jar = path.join(jars, "alice");
    expect((await caddyAdmin(platform.config.host.frontDoorAdminPort, "GET", `/id/${routeId}`)).status).toBe(
      200,
    );
    expect(
      (await caddyAdmin(platform.config.host.frontDoorAdminPort, "DELETE", `/id/${routeId}`)).status,
    ).toBe(200);
    expect((await curl(frontDoorUrl("alice"), "-b", jar)).status).toBe(404);

    const patched = await h.as("alice", "PATCH", `/projects/${ids.alice}`, { drift_remediation: "repair" });
    expect(patched.statusCode, patched.body).toBe(200);
    const { operation } = await requestOperation(h.db, ids.alice, "check-drift");
    expect((await settledOperation(h.db, operation)).state).toBe("succeeded");
    const drift = (await h.as("alice", "GET", `/projects/${ids.alice}/drift`)).json();
    expect(drift.status).toBe("drifted");
    expect(drift.resources).toEqual([
      expect.objectContaining({ type: "sandbox:host:FrontDoorRoute", change: "deleted" }),
    ]);
    // Repair is an update with refresh, queued by the check: the route is back and serves the page.
    await waitFor("the route to be put back", 120_000, async () =>
      (await curl(frontDoorUrl("alice"), "-b", jar)).status === 200 ? true : undefined,
    );
    expect(await curl(frontDoorUrl("alice"), "-b", jar)).toEqual({ status: 200, body: `${PAGE}\n` });
  });

  it("a named route (a worktree's) has its own host and its own cookie", async () => {
    const patched = await h.as("alice", "PATCH", `/projects/${ids.alice}`, {
      ports: [{ port: 3000 }, { port: 3001, name: "feature" }],
    });
    expect(patched.statusCode, patched.body).toBe(202);
    const admin = platform.config.host.frontDoorAdminPort;
    await waitFor("the feature route", 60_000, async () =>
      (await caddyAdmin(admin, "GET", `/id/fd-${ids.alice}-feature-3001`)).status === 200 ? true : undefined,
    );
    await h.waitForStatus("alice", ids.alice, "running");
    expect((await h.as("alice", "GET", `/projects/${ids.alice}`)).json().front_door).toEqual([
      { name: null, port: 3000, url: frontDoorUrl("alice") },
      { name: "feature", port: 3001, url: frontDoorUrl("alice", "feature") },
    ]);
    // The main route's cookie is not sent to the feature host (host-only): 404 there until its own session.
    expect((await curl(frontDoorUrl("alice", "feature"), "-b", path.join(jars, "alice"))).status).toBe(404);
    const session = await h.as("alice", "POST", `/projects/${ids.alice}/front-door/session`, {
      name: "feature",
    });
    expect(session.statusCode, session.body).toBe(200);
    const jar = path.join(jars, "alice-feature");
    expect(await curl(session.json().url, "-L", "-c", jar, "-b", jar)).toEqual({
      status: 200,
      body: `${PAGE}\n`,
    });
    // By port (what sbx open sends): the route of that port, whatever its name.
    const byPort = await h.as("alice", "POST", `/projects/${ids.alice}/front-door/session`, { port: 3001 });
    expect(byPort.json().front_door_url).toBe(frontDoorUrl("alice", "feature"));
    const unknown = await h.as("alice", "POST", `/projects/${ids.alice}/front-door/session`, {
      name: "nope",
    });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().message).toContain("no declared front-door port is named nope");
  });

  it("the owner's cookie never reaches the sandbox; the dev server's own cookies do", async () => {
    const echo = [
      "import http.server",
      "class Echo(http.server.BaseHTTPRequestHandler):",
      "    def do_GET(self):",
      "        body = repr(self.headers.get_all('Cookie')).encode()",
      "        self.send_response(200)",
      "        self.send_header('content-length', str(len(body)))",
      "        self.end_headers()",
      "        self.wfile.write(body)",
      "http.server.HTTPServer(('0.0.0.0', 3005), Echo).serve_forever()",
    ].join("\n");
    const started = await h.as("alice", "POST", `/projects/${ids.alice}/exec`, {
      command: `echo ${Buffer.from(echo).toString("base64")} | base64 -d > /tmp/echo.py && exec python3 /tmp/echo.py`,
      background: true,
    });
    expect(started.statusCode, started.body).toBe(202);
    const patched = await h.as("alice", "PATCH", `/projects/${ids.alice}`, {
      ports: [
        { port: 3000 },
        { port: 3001, name: "feature" },
        { port: 3005, name: "echo" },
        { port: 3006, name: "hostile" },
      ],
    });
    expect(patched.statusCode, patched.body).toBe(202);
    await waitFor("the echo route", 60_000, async () =>
      (await caddyAdmin(platform.config.host.frontDoorAdminPort, "GET", `/id/fd-${ids.alice}-echo-3005`))
        .status === 200
        ? true
        : undefined,
    );
    await h.waitForStatus("alice", ids.alice, "running");
    const session = await h.as("alice", "POST", `/projects/${ids.alice}/front-door/session`, {
      name: "echo",
    });
    expect(session.statusCode, session.body).toBe(200);
    const jar = path.join(jars, "alice-echo");
    const opened = await curl(session.json().url, "-L", "-c", jar, "-b", jar);
    expect(opened.status).toBe(200);
    expect(opened.body).not.toContain("sbx_front_door");
    const owner = `sbx_front_door=${await cookieValue(jar)}`;
    // Wherever the owner's cookie stands among the dev server's own, only the dev server's get through.
    for (const [sent, seen] of [
      [`theme=dark; ${owner}; lang=en`, "['theme=dark; lang=en']"],
      [`${owner}; theme=dark`, "['theme=dark']"],
      [`theme=dark; ${owner}`, "['theme=dark']"],
      [`theme=dark;${owner};lang=en`, "['theme=dark;lang=en']"],
    ])
      expect(await curl(frontDoorUrl("alice", "echo"), "-H", `Cookie: ${sent}`)).toEqual({
        status: 200,
        body: seen,
      });
  });

  // The front door's upstream side is the sandbox's to write: a dev server that answers garbage, absurd
  // headers, half an answer or nothing at all. Caddy refuses each (a 502, or the cut answer as it came), and
  // serves on: same process, the hostile route's next request and the other routes answered.
  it("a dev server that answers malformed responses gets a 502 or a cut answer; the front door serves on", async () => {
    const hostile = [
      "import socket, threading, time",
      "ANSWERS = {",
      "  '/bad-status': b'HTTP/1.1 abc\\r\\n\\r\\n',",
      "  '/garbage': bytes(range(256)) * 64,",
      "  '/huge-header': b'HTTP/1.1 200 OK\\r\\nX-Big: ' + b'a' * (4 << 20) + b'\\r\\n\\r\\n',",
      "  '/many-headers': b'HTTP/1.1 200 OK\\r\\n' + b''.join(b'X-%d: a\\r\\n' % i for i in range(100000)) + b'\\r\\n',",
      "  '/cut': b'HTTP/1.1 200 OK\\r\\nContent-Length: 1000\\r\\n\\r\\nabc',",
      "  '/bad-chunk': b'HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\nzz\\r\\n',",
      "  '/smuggle': b'HTTP/1.1 200 OK\\r\\nContent-Length: 3\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nHTTP/1.1 200 OK\\r\\n\\r\\n',",
      "  '/nul-header': b'HTTP/1.1 200 OK\\r\\nX-A: a\\x00b\\r\\nContent-Length: 2\\r\\n\\r\\nok',",
      "  '/ok': b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok',",
      "}",
      "def serve(c):",
      "    data = b''",
      "    while b'\\r\\n\\r\\n' not in data:",
      "        chunk = c.recv(65536)",
      "        if not chunk: return c.close()",
      "        data += chunk",
      "    path = data.split(b' ')[1].decode()",
      "    try:",
      "        if path == '/silent': time.sleep(20)",
      "        else: c.sendall(ANSWERS[path])",
      "    except OSError: pass",
      "    c.close()",
      "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
      "s.bind(('0.0.0.0', 3006)); s.listen(64)",
      "while True:",
      "    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()",
    ].join("\n");
    const started = await h.as("alice", "POST", `/projects/${ids.alice}/exec`, {
      command: `echo ${Buffer.from(hostile).toString("base64")} | base64 -d > /tmp/hostile.py && exec python3 /tmp/hostile.py`,
      background: true,
    });
    expect(started.statusCode, started.body).toBe(202);
    const session = await h.as("alice", "POST", `/projects/${ids.alice}/front-door/session`, {
      name: "hostile",
    });
    expect(session.statusCode, session.body).toBe(200);
    const jar = path.join(jars, "alice-hostile");
    await curl(session.json().url, "-c", jar, "-b", jar);
    const url = (p: string) => `${frontDoorUrl("alice", "hostile").replace(/\/$/, "")}${p}`;
    await waitFor("the hostile dev server", 30_000, async () =>
      (await curl(url("/ok"), "-b", jar)).body === "ok" ? true : undefined,
    );
    const caddyPid = (await fs.readFile(caddyPaths(platform.config.host).pidFile, "utf8")).trim();
    const answers: Record<string, number> = {};
    for (const p of [
      "/bad-status",
      "/garbage",
      "/huge-header",
      "/many-headers",
      "/bad-chunk",
      "/nul-header",
    ]) {
      answers[p] = await curl(url(p), "-b", jar).then(
        (answer) => answer.status,
        () => -1, // curl itself refused what came
      );
      expect((await curl(url("/ok"), "-b", jar)).body, `after ${p}`).toBe("ok");
    }
    // A malformed status line or header block is never passed on as the dev server's: Caddy's own 502.
    expect(answers).toEqual({
      "/bad-status": 502,
      "/garbage": 502,
      "/huge-header": 502,
      "/many-headers": 502,
      "/bad-chunk": 200, // the status line and headers were whole; the body is cut where it broke
      // Go's header parser passes a NUL inside a value on; the client refuses it (curl: "Nul byte in header").
      "/nul-header": -1,
    });
    // A cut answer arrives cut; a smuggled second answer is not read as an answer to anything.
    const cut = await run("curl", ["-sS", "-m", "10", "-b", jar, url("/cut")]).catch(
      (error: { stdout?: string }) => ({ stdout: error.stdout ?? "" }),
    );
    expect(cut.stdout).toBe("abc");
    expect((await curl(url("/smuggle"), "-b", jar)).body).toBe("");
    expect((await curl(url("/ok"), "-b", jar)).body).toBe("ok");
    // A dev server that never answers holds only its own request.
    const silent = run("curl", ["-sS", "-m", "3", "-b", jar, url("/silent")]).catch(() => undefined);
    expect((await curl(url("/ok"), "-b", jar)).body).toBe("ok");
    await silent;
    // The same Caddy, and the other routes as before.
    expect((await fs.readFile(caddyPaths(platform.config.host).pidFile, "utf8")).trim()).toBe(caddyPid);
    expect(process.kill(Number(caddyPid), 0)).toBe(true);
    expect(await curl(frontDoorUrl("alice"), "-b", path.join(jars, "alice"))).toEqual({
      status: 200,
      body: `${PAGE}\n`,
    });
  });

  it("shows a stopped sandbox's owner a 'not running' page, and the page again after start", async () => {
    const jar = path.join(jars, "alice");
    expect((await h.as("alice", "POST", `/projects/${ids.alice}/stop`, {})).statusCode).toBe(202);
    await h.waitForStatus("alice", ids.alice, "stopped");
    const stopped = await curl(frontDoorUrl("alice"), "-b", jar);
    expect(stopped.status).toBe(503);
    expect(stopped.body).toContain("front-door-alice");
    expect(stopped.body).toContain("not running");
    expect(stopped.body).toContain("<b>stopped</b>");
    // Others still learn nothing.
    expect((await curl(frontDoorUrl("alice"))).status).toBe(404);

    expect((await h.as("alice", "POST", `/projects/${ids.alice}/start`, {})).statusCode).toBe(202);
    await h.waitForStatus("alice", ids.alice, "running");
    await startDevServer("alice"); // a stop ends the sandbox's processes; the dev server is started again
    expect(await curl(frontDoorUrl("alice"), "-b", jar)).toEqual({ status: 200, body: `${PAGE}\n` });
  });

  it("an owner's request wakes a sandbox the platform put to sleep, held until it runs; nobody else's does", async () => {
    const jar = path.join(jars, "alice");
    const key = `${IDLE_SHUTDOWN}${ids.alice}-${Date.now()}`;
    const { operation } = await requestOperation(h.db, ids.alice, "stop", key);
    expect((await settledOperation(h.db, operation)).state).toBe("succeeded");
    // Anyone else: the 404 of a project that does not exist, and it sleeps on.
    expect((await curl(frontDoorUrl("alice"))).status).toBe(404);
    expect(await h.statusOf("alice", ids.alice)).toBe("stopped");
    // The owner's request is held while it starts, then goes to the sandbox. A container's pause keeps its
    // files, not its processes: the dev server is not there to answer (Caddy's 502) until it is started.
    const woken = await curl(frontDoorUrl("alice"), "-b", jar, "-m", "120");
    expect(woken.status).toBe(502);
    expect(await h.statusOf("alice", ids.alice)).toBe("running");
    const starts = await h.db.query<{ idempotency_key: string }>(
      "select idempotency_key from operations where project_id = $1 and kind = 'start' and idempotency_key = $2",
      [ids.alice, `wake-${operation.id}`],
    );
    expect(starts.rows).toHaveLength(1);
    await startDevServer("alice");
    expect(await curl(frontDoorUrl("alice"), "-b", jar)).toEqual({ status: 200, body: `${PAGE}\n` });
  });
});

describe("dev servers found by themselves (issue 45)", () => {
  const domain = "sandbox.localhost";
  const devUrl = (host: string) => `http://${host}:${platform.config.host.frontDoorPort}/`;

  /** A server started as the agent in `dir` (made with an index page), listening on `bind`:`port`. */
  async function serve(dir: string, port: number, bind: string, page: string) {
    const started = await h.as("alice", "POST", `/projects/${ids.alice}/exec`, {
      command: `mkdir -p ${dir} && echo '${page}' > ${dir}/index.html && cd ${dir} && exec python3 -m http.server ${port} --bind ${bind}`,
      background: true,
    });
    expect(started.statusCode, started.body).toBe(202);
    await waitFor(`${page} listening`, 30_000, async () =>
      (
        await execIn(tenantNames(ids.alice).container, `curl --noproxy '*' -s -m 2 http://${bind}:${port}/`)
      ).stdout.includes(page)
        ? true
        : undefined,
    );
  }

  /** The owner's one-time session for a found server, opened with curl (cookie in `jar`). */
  async function open(body: Record<string, unknown>, jar: string) {
    const session = await h.as("alice", "POST", `/projects/${ids.alice}/dev-servers/session`, body);
    expect(session.statusCode, session.body).toBe(200);
    return { session: session.json(), opened: await curl(session.json().url, "-L", "-c", jar, "-b", jar) };
  }

  it("routes a port that starts listening at its worktree's name, at once, to its owner alone", async () => {
    const part = "front-door-alice";
    const label = frontDoorHost(ids.alice, undefined).split(".")[0]!;
    const address = await sandboxAddress("alice");
    // Two worktrees' servers on the same port: one on the sandbox's address, one on loopback alone.
    await serve("/home/agent/workspace/app/.worktrees/one", 5173, address, "page of worktree one");
    await serve("/home/agent/workspace/app/.worktrees/two", 5173, "127.0.0.1", "page of worktree two");

    // Listed the moment they listen, each under its worktree's name (nothing declared, no stack update).
    const listed = await h.as("alice", "GET", `/projects/${ids.alice}/dev-servers`);
    expect(listed.statusCode, listed.body).toBe(200);
    const servers: {
      port: number;
      address: string;
      worktree: string | null;
      reachable: boolean;
      hosts: string[];
    }[] = listed.json().dev_servers;
    expect(servers).toContainEqual(
      expect.objectContaining({
        port: 5173,
        address,
        worktree: "one",
        reachable: true,
        hosts: [`one.${part}.${domain}`, `p5173.${part}.${domain}`],
      }),
    );
    expect(servers).toContainEqual(
      expect.objectContaining({
        port: 5173,
        address: "127.0.0.1",
        worktree: "two",
        reachable: false,
        hosts: [`two.${part}.${domain}`],
      }),
    );
    // The sandbox's own services (sshd as root) are never a dev server.
    expect(servers.map((s) => s.port)).not.toContain(2222);
    // The project's main name is its lowest port outside a worktree.
    const main = servers.filter((s) => s.worktree === null).sort((a, b) => a.port - b.port)[0]!;
    expect(main.hosts[0]).toBe(`${part}.${domain}`);

    const jar = path.join(jars, "alice-dev");
    const { session, opened } = await open({ worktree: "one" }, jar);
    expect(session.front_door_url).toBe(devUrl(`one.${part}.${domain}`));
    expect(opened).toEqual({ status: 200, body: "page of worktree one\n" });
    expect(await curl(devUrl(`one.${part}.${domain}`), "-b", jar)).toEqual({
      status: 200,
      body: "page of worktree one\n",
    });
    // The hex label is an alias of the project's part (its own host, so its own cookie).
    const aliasJar = path.join(jars, "alice-dev-alias");
    const another = await h.as("alice", "POST", `/projects/${ids.alice}/dev-servers/session`, {
      worktree: "one",
    });
    const alias = another.json().url.replace(`one.${part}.`, `one.${label}.`);
    expect(await curl(alias, "-L", "-c", aliasJar, "-b", aliasJar)).toEqual({
      status: 200,
      body: "page of worktree one\n",
    });

    // The loopback one has its name and says why the front door cannot reach it.
    const twoJar = path.join(jars, "alice-dev-two");
    const two = await open({ worktree: "two" }, twoJar);
    expect(two.opened.status).toBe(503);
    expect(two.opened.body).toContain("listens on <code>127.0.0.1</code> alone");

    // Nobody else: no cookie, a forged one, bob's own cookie, bob's session request, a name nobody has.
    expect((await curl(devUrl(`one.${part}.${domain}`))).status).toBe(404);
    expect(
      (await curl(devUrl(`one.${part}.${domain}`), "-H", "Cookie: sbx_front_door=forged.value")).status,
    ).toBe(404);
    const bob = await login("bob");
    const asBob = await curl(
      devUrl(`one.${part}.${domain}`),
      "-H",
      `Cookie: sbx_front_door=${await cookieValue(bob.jar)}`,
    );
    expect(asBob.status).toBe(404);
    expect(asBob.body).not.toContain("worktree one");
    expect((await h.as("bob", "POST", `/projects/${ids.alice}/dev-servers/session`, {})).statusCode).toBe(
      404,
    );
    expect((await curl(devUrl(`nobody-has-this.${domain}`), "-b", jar)).status).toBe(404);

    // Bad input: a port and a worktree at once, a worktree name that cannot be one, nothing on that port.
    for (const [body, field] of [
      [{ port: 5173, worktree: "one" }, "worktree"],
      [{ worktree: "../one" }, "worktree"],
    ] as const) {
      const answer = await h.as("alice", "POST", `/projects/${ids.alice}/dev-servers/session`, body);
      expect(answer.statusCode, answer.body).toBe(400);
      expect(answer.json().details.map((d: { field: string }) => d.field)).toContain(field);
    }
    const nothing = await h.as("alice", "POST", `/projects/${ids.alice}/dev-servers/session`, { port: 6123 });
    expect(nothing.statusCode).toBe(404);
    expect(nothing.json().message).toContain("nothing listens on port 6123");

    // A port the owner keeps private is neither listed nor routed (one PATCH, no stack update), until released.
    const kept = await h.as("alice", "PATCH", `/projects/${ids.alice}`, { private_ports: [5173] });
    expect(kept.statusCode, kept.body).toBe(200);
    const privately = (await h.as("alice", "GET", `/projects/${ids.alice}/dev-servers`)).json();
    expect(privately.private_ports).toEqual([5173]);
    expect(privately.dev_servers.map((s: { port: number }) => s.port)).not.toContain(5173);
    expect((await curl(devUrl(`one.${part}.${domain}`), "-b", jar)).status).toBe(503);
    expect((await curl(devUrl(`p5173.${part}.${domain}`), "-b", jar)).status).toBe(404);
    const badPort = await h.as("alice", "PATCH", `/projects/${ids.alice}`, { private_ports: [80] });
    expect(badPort.statusCode, badPort.body).toBe(400);
    expect(badPort.json().details.map((d: { field: string }) => d.field)).toContain("private_ports.0");
    expect((await h.as("alice", "PATCH", `/projects/${ids.alice}`, { private_ports: [] })).statusCode).toBe(
      200,
    );
    expect(await curl(devUrl(`one.${part}.${domain}`), "-b", jar)).toEqual({
      status: 200,
      body: "page of worktree one\n",
    });

    // Stopped: the same name shows its owner the page that says nothing listens there.
    const stopped = await h.as("alice", "POST", `/projects/${ids.alice}/exec`, {
      // (`[h]`: the pattern does not match the shell that runs it)
      command: `pkill -f '[h]ttp.server 5173 --bind ${address}' || true`,
    });
    expect(stopped.statusCode, stopped.body).toBe(200);
    await waitFor("worktree one's server to stop", 10_000, async () =>
      (await curl(devUrl(`one.${part}.${domain}`), "-b", jar)).status === 503 ? true : undefined,
    );
    const gone = await curl(devUrl(`one.${part}.${domain}`), "-b", jar);
    expect(gone.body).toContain("nothing listens on worktree one");
  });
});
