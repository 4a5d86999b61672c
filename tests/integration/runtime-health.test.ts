// The runtime service as `npm run local` starts it: a real process, real prerequisites. /healthz's checks
// are asked from this host (loopback), which sees them; a relayed request does not.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, promises as fs, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { livePid, run, waitFor } from "../../lib/process.js";
import { imageRegistry } from "../../lib/host/registry.js";
import { squidPaths, squidProxy } from "../../lib/host/squid.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import type { HostConfig } from "../../stacks/config.js";
import { writeStackFile } from "../helpers/api.js";
import { freePort, isolatedHostConfig } from "../helpers/host.js";
import { RUNTIME_ARGV } from "../../scripts/bundles.js";

const quiet = () => undefined;
let host: HostConfig;
let configFile: string;
let apiPort: number;
let service: ReturnType<typeof startService>;
let serviceOutput = "";

interface Health {
  status: string;
  checks: { name: string; ready: boolean; detail: string }[];
}

async function health(): Promise<{ code: number; body: Health }> {
  const response = await fetch(`http://127.0.0.1:${apiPort}/healthz`);
  return { code: response.status, body: (await response.json()) as Health };
}

function startService(file: string): {
  child: ChildProcess;
  exited: Promise<number | null>;
  output: () => string;
} {
  let output = "";
  const child = spawn(process.execPath, RUNTIME_ARGV, {
    cwd: REPO_ROOT,
    env: { ...process.env, AGENT_SANDBOX_CONFIG: file },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, exited, output: () => output };
}

beforeAll(async () => {
  host = await isolatedHostConfig();
  await squidProxy({ port: host.squidPort, ...host }).ensure(quiet);
  await imageRegistry({ port: host.registryPort, ...host }).ensure(quiet);
  apiPort = await freePort();
  configFile = await writeStackFile(host, "test", {
    target: "local",
    host,
    // Without the host watchdog, which would restart the registry and Squid this file stops, racing its
    // checks (its own tests: unit/host-watchdog, chaos/host-faults).
    runtime: {
      apiPort,
      terminalPort: await freePort(),
      listenHost: "127.0.0.1",
      jobs: { hostWatchdogSeconds: 0 },
    },
  });
  service = startService(configFile);
  await waitFor("runtime service", 60_000, () => health().then(() => true));
  serviceOutput = service.output();
});

afterAll(async () => {
  service?.child.kill("SIGTERM");
  expect(await service?.exited).toBe(0); // a clean shutdown on SIGTERM
  await run("squid", ["-k", "shutdown", "-f", squidPaths(host).config]).catch(quiet);
  const registryPid = await livePid(path.join(host.runDir, "registry.pid"));
  if (registryPid) process.kill(registryPid, "SIGTERM");
  await waitFor("squid to exit", 10_000, async () =>
    (await livePid(squidPaths(host).pidFile)) ? undefined : true,
  );
  await fs.rm(path.dirname(host.configDir), { recursive: true, force: true });
});

describe("GET /healthz", () => {
  it("reports every prerequisite ready, with versions and locations", async () => {
    // Right after start a probe can miss its deadline once (first engine connection): readiness is polled.
    const { code, body } = await waitFor("the service to report ready", 20_000, async () => {
      const answer = await health();
      return answer.code === 200 ? answer : undefined;
    });
    expect(code, JSON.stringify(body)).toBe(200);
    expect(body.status).toBe("ready");
    const byName = Object.fromEntries(body.checks.map((check) => [check.name, check]));
    expect(Object.keys(byName).sort()).toEqual([
      "container-engine",
      "database",
      "gvisor",
      "microvm",
      "pulumi",
      "registry",
      "squid",
      "state-backend",
    ]);
    // The microVM probe runs in the background (the API opened before it ended): ready either way, since
    // new projects are containers by default; then it names the accelerator and why (issue 19).
    expect(byName.microvm?.ready).toBe(true);
    const decided = await waitFor("the microVM probe's decision on /healthz", 120_000, async () => {
      const check = (await health()).body.checks.find((c) => c.name === "microvm");
      return check && check.detail !== "still probing the host" ? check : undefined;
    });
    expect(decided.detail).toMatch(/^accelerator (kvm|tcg) \(.*\); QEMU emulator version \d+/);
    // The same for gVisor (issue 48): ready either way (new projects are runc unless configured), then what the
    // probe found: the runtime and its kernel, or why it is refused (this machine's runsc: docs/security.md).
    expect(byName.gvisor?.ready).toBe(true);
    const gvisor = await waitFor("the gVisor probe's decision on /healthz", 120_000, async () => {
      const check = (await health()).body.checks.find((c) => c.name === "gvisor");
      return check && check.detail !== "still probing the engine" ? check : undefined;
    });
    expect(gvisor.detail).toMatch(/^(runtime runsc: .*gVisor|not available: .+)/);
    expect(byName.pulumi?.detail).toMatch(/^v3\.\d+\.\d+ at \//);
    expect(byName["container-engine"]?.detail).toMatch(/API 1\.\d+, unix:\/\/\/var\/run\/docker\.sock/);
    expect(byName.squid?.detail).toContain(`port ${host.squidPort}`);
    expect(byName.registry?.detail).toContain(`localhost:${host.registryPort}`);
    expect(byName.database?.detail).toBe(`pglite (${path.join(host.dataDir, "db")})`);
    expect(byName["state-backend"]?.detail).toMatch(/MiB free of \d+\.\d MiB$/);
    expect(byName["state-backend"]?.detail).toContain(`${path.join(host.dataDir, "state")}: `);
    expect(serviceOutput).toMatch(/runtime ready/);
  });

  it("tells a caller elsewhere (a relayed request) only ready or not; /metrics wants the token from the data directory", async () => {
    const relayed = { "x-forwarded-for": "203.0.113.7" };
    // Polled: on a busy machine one probe of the engine can miss its deadline (as in the test above).
    const publicAnswer = await waitFor("a ready answer", 20_000, async () => {
      const answer = await fetch(`http://127.0.0.1:${apiPort}/healthz`, { headers: relayed });
      return answer.status === 200 ? answer : undefined;
    });
    expect(await publicAnswer.json()).toEqual({ status: "ready" });

    const tokenFile = path.join(host.dataDir, "metrics.token");
    expect((await fs.stat(tokenFile)).mode & 0o777).toBe(0o600);
    const token = (await fs.readFile(tokenFile, "utf8")).trim();
    const metrics = (headers: Record<string, string>) =>
      fetch(`http://127.0.0.1:${apiPort}/metrics`, { headers: { ...relayed, ...headers } });
    const refused = await metrics({});
    expect(refused.status).toBe(401);
    const scraped = await metrics({ authorization: `Bearer ${token}` });
    expect(scraped.status).toBe(200);
    expect(await scraped.text()).toMatch(/^agent_sandbox_reconciler_queue_depth \d+$/m);
    const detailed = await fetch(`http://127.0.0.1:${apiPort}/healthz`, {
      headers: { ...relayed, authorization: `Bearer ${token}` },
    });
    expect(((await detailed.json()) as Health).checks.map((check) => check.name)).toContain("pulumi");
  });

  it("names the prerequisite that stopped, and why, with status 503", async () => {
    const registryPid = await livePid(path.join(host.runDir, "registry.pid"));
    process.kill(registryPid!, "SIGTERM");
    // Until the killed registry has exited, its port refuses and its pid still lives: the check says
    // "fetch failed" then (seen once in a full run, session 60); once it has exited, that no pid lives.
    const notReady = await waitFor(
      "only the registry to be reported missing, as not running",
      15_000,
      async () => {
        const { code, body } = await health();
        const missing = body.checks.filter((check) => !check.ready);
        return code === 503 &&
          body.status === "not ready" &&
          missing.map((check) => check.name).join() === "registry" &&
          /not running/.test(missing[0]?.detail ?? "")
          ? missing
          : undefined;
      },
    );
    expect(notReady[0]?.detail).toMatch(/not running \(no live pid in .*registry\.pid\)/);

    await run("squid", ["-k", "shutdown", "-f", squidPaths(host).config]);
    // Both named (a busy host may add a check that answered late to the list for a moment; the two stopped
    // ones must be there whatever else is).
    await expect
      .poll(async () => (await health()).body.checks.filter((c) => !c.ready).map((c) => c.name), {
        timeout: 15_000,
      })
      .toEqual(expect.arrayContaining(["squid", "registry"]));
    const squid = (await health()).body.checks.find((check) => check.name === "squid");
    expect(squid?.detail).toMatch(/not running|nothing accepts connections/);
  });

  it("a second service on the same data directory exits at once: the embedded database is the first one's", async () => {
    const second = startService(configFile);
    expect(await second.exited).toBe(1);
    expect(second.output()).toContain(`is open in process ${service.child.pid} (the runtime?)`);
  });

  it("a second service on the same port exits at once, saying the port is in use", async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "second-runtime-"));
    try {
      const other = await writeStackFile(host, "second", {
        target: "local",
        host: { ...host, dataDir },
        runtime: { apiPort, terminalPort: await freePort(), listenHost: "127.0.0.1" },
      });
      const second = startService(other);
      expect(await second.exited).toBe(1);
      expect(second.output()).toContain(`port ${apiPort} on 127.0.0.1 is in use`);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("a bad stack file stops the service before it listens, naming the key", async () => {
    const bad = await writeStackFile(host, "bad", { target: "local", runtime: { apiPort: "x" } });
    const started = startService(bad);
    expect(await started.exited).toBe(1);
    expect(started.output()).toContain("agent-sandbox:runtime.apiPort: Invalid input: expected number");
  });
});
