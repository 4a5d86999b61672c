// Benchmark (issue 45; seed 004 SC-004 "TUI session attach latency is under 500ms" and SC-001 "from `start` to
// the agent executing tasks in under 30 seconds, warm cache, the sandbox created before"), through the runtime
// as `npm run local` runs it, the credential gateway and a stub of Anthropic's API (tests/helpers/model-stub.ts).
//
// SC-004: `sbx attach` in a real PTY (util-linux `script`, 120x40), from the command's start until the tmux
// screen's prompt line has arrived, then Ctrl-] (sbx exits); beside it in the same run plain `ssh -tt ... tmux
// attach` to the same session through the sandbox's sshd (detached with tmux's own key), the same attach run
// from the sources under tsx (what bin/sbx ran before the CLI's bundle), and the CLI's start alone.
// SC-001: the project stopped (`sbx stop`), then `sbx start` in the repository and a prompt to the agent through
// the agent pane's API (`POST /projects/{id}/agent/turns`, Claude Code in print mode) until its first command's
// output is in the turn's events; beside it the same prompt to the already running sandbox.
// Prints figures; asserts nothing (npm run bench).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { waitFor } from "../../lib/process.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { startModelStub } from "../helpers/model-stub.js";
import { hostGit, SBX, sbx } from "../helpers/sbx.js";
import { ms, percentile, report, type Figure } from "./report.js";

const ATTACHES = Number(process.env.BENCH_ATTACH_ROUNDS ?? 20);
const STARTS = Number(process.env.BENCH_AGENT_START_ROUNDS ?? 3);
const SUBNETS = "10.245.32.0/22";
const SSH_PORTS: [number, number] = [29070, 29075];
const PASSWORD = "sbx-agent-bench-1";
const EMAIL = `sbx-agent-bench-${randomBytes(4).toString("hex")}@example.com`;
/** The tmux screen's prompt line as the image's shell draws it (`agent@<host>:<dir> (<branch>)$`). */
const PROMPT = /agent@[^\s:]+:[^\n$]*\$/;
/** Escape sequences and control bytes, taken out of a PTY's output before the prompt is looked for. */
const ESCAPES =
  /\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78MDEc]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|[\x00-\x08\x0e-\x1f]/g;

const git = hostGit;

/**
 * `command` (a shell line) in a PTY of 120x40 under util-linux `script`: milliseconds from the spawn until the
 * screen it draws holds the prompt; then `detach` is typed and the process's exit awaited.
 */
async function attachOnce(
  command: string,
  env: NodeJS.ProcessEnv,
  cwd: string,
  detach: string,
): Promise<number> {
  const started = performance.now();
  const child = spawn("script", ["-qfec", `stty cols 120 rows 40; exec ${command}`, "/dev/null"], {
    cwd,
    env: { ...env, TERM: "xterm-256color" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let seen = "";
  let errors = "";
  const exited = new Promise<number>((resolve) => child.once("close", (code) => resolve(code ?? -1)));
  const prompted = new Promise<number>((resolve, reject) => {
    child.stdout.on("data", (chunk: Buffer) => {
      seen += chunk.toString("utf8");
      if (PROMPT.test(seen.replace(ESCAPES, ""))) resolve(performance.now() - started);
    });
    child.stderr.on("data", (chunk: Buffer) => (errors += chunk.toString("utf8")));
    void exited.then((code) =>
      reject(
        new Error(`${command} exited ${code} before its prompt: ${seen.replace(ESCAPES, "")} ${errors}`),
      ),
    );
    setTimeout(
      () => reject(new Error(`no prompt from ${command} in 30 s: ${seen.replace(ESCAPES, "")}`)),
      30_000,
    );
  });
  try {
    return await prompted;
  } finally {
    child.stdin.write(detach);
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

interface TurnEvent {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** Milliseconds from now until the agent's turn for `prompt` has its first command's output; the turn ends. */
async function agentRuns(base: string, token: string, projectId: string, prompt: string): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${base}/projects/${projectId}/agent/turns`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt }),
  });
  if (response.status !== 200)
    throw new Error(`the turn answered ${response.status}: ${await response.text()}`);
  const decoder = new TextDecoder();
  let pending = "";
  let outputAt: number | undefined;
  const events: TurnEvent[] = [];
  for await (const chunk of response.body!) {
    pending += decoder.decode(chunk as Uint8Array, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n")) >= 0) {
      const event = JSON.parse(pending.slice(0, at)) as TurnEvent;
      pending = pending.slice(at + 1);
      events.push(event);
      if (event.type === "output" && outputAt === undefined) outputAt = performance.now() - started;
    }
  }
  const end = events.at(-1);
  if (outputAt === undefined || end?.type !== "end" || end.exit_code !== 0)
    throw new Error(`the agent's turn ran no command: ${JSON.stringify(events)}`);
  return outputAt;
}

async function main(): Promise<void> {
  const stub = await startModelStub();
  const gateway = {
    port: 3180,
    upstreams: {},
    caFile: stub.caFile,
    resolve: { [stub.host]: stub.address },
    maxConcurrentRequests: 16,
    headersTimeoutSeconds: 20,
  };
  const platform = await testPlatform({
    subnetPool: SUBNETS,
    sshPortRange: SSH_PORTS,
    leaseSeconds: 10,
    credentialGateway: gateway,
  });
  const work = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-agent-bench-"));
  const home = path.join(work, "config");
  const repo = path.join(work, "app");
  let service: RuntimeProcess | undefined;
  let started = false;
  const figures: Figure[] = [];
  try {
    const { host, tenants } = platform.config;
    service = await startRuntime("sbx-agent-bench", {
      host,
      tenants: {
        image: tenants.image,
        subnetPool: SUBNETS,
        sshPortRange: SSH_PORTS,
        leaseSeconds: 10,
        credentialGateway: gateway,
      },
    });
    const base = service.base;
    const call = async (method: string, url: string, body?: unknown, token = "") => {
      const response = await fetch(`${base}${url}`, {
        method,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      if (response.status >= 300) throw new Error(`${method} ${url}: ${response.status} ${text}`);
      return text ? (JSON.parse(text) as Record<string, any>) : {}; // eslint-disable-line @typescript-eslint/no-explicit-any
    };
    await call("POST", "/auth/register", { email: EMAIL, password: PASSWORD });
    const token = (await call("POST", "/auth/login", { email: EMAIL, password: PASSWORD }))
      .access_token as string;
    const login = await sbx(home, work, ["login", "--api", base, "--email", EMAIL, "--password-stdin"], {
      input: PASSWORD,
    });
    if (login.code !== 0) throw new Error(login.stderr);

    await fs.mkdir(repo);
    git(repo, ["init", "-q", "-b", "main"]);
    await fs.writeFile(path.join(repo, "README.md"), "# app\n");
    git(repo, ["add", "-A"]);
    git(repo, ["commit", "-q", "-m", "first"]);
    const first = await sbx(home, repo, ["start", "--json"]);
    if (first.code !== 0) throw new Error(`sbx start: ${first.stderr}`);
    started = true;
    const projectId = first.json<{ project_id: string }>().project_id;
    const secret = await call(
      "PUT",
      `/projects/${projectId}/secrets/ANTHROPIC_API_KEY`,
      { value: `sk-ant-bench-${randomBytes(8).toString("hex")}` },
      token,
    );
    await waitFor("the secret's update", 300_000, async () => {
      const project = await call("GET", `/projects/${projectId}`, undefined, token);
      if (project.operation?.id !== secret.operation.id) return undefined;
      if (project.operation.state === "failed") throw new Error(JSON.stringify(project.operation));
      return project.operation.state === "succeeded" ? true : undefined;
    });

    // SC-004. The CLI's start alone first: the bundle bin/sbx runs, and the sources under tsx.
    const env = { ...process.env, XDG_CONFIG_HOME: home };
    const tsxSbx = `node --import ${path.join(REPO_ROOT, "node_modules/tsx/dist/esm/index.mjs")} ${path.join(REPO_ROOT, "cli/main.ts")}`;
    const startOnly = async (command: string) => {
      const samples: number[] = [];
      for (let i = 0; i < 10; i++) {
        const t0 = performance.now();
        execFileSync("sh", ["-c", `${command} --version`], { env });
        samples.push(performance.now() - t0);
      }
      return samples;
    };
    const bundleStart = await startOnly(SBX);
    const sourcesStart = await startOnly(tsxSbx);
    const view = await call("GET", `/projects/${projectId}`, undefined, token);
    const key = path.join(home, "agent-sandbox", "keys", projectId);
    const ssh =
      `ssh -tt -F /dev/null -i ${key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no ` +
      `-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes -p ${view.ssh.port} agent@${view.ssh.host} tmux attach -t main`;
    const attaches: number[] = [];
    const plain: number[] = [];
    const fromSources: number[] = [];
    // Interleaved, so a slower minute of the machine falls on all three alike.
    for (let round = 0; round < ATTACHES; round++) {
      attaches.push(await attachOnce(`${SBX} attach`, env, repo, "\x1d"));
      plain.push(await attachOnce(ssh, env, repo, "\x02d"));
      if (round % 4 === 0) fromSources.push(await attachOnce(`${tsxSbx} attach`, env, repo, "\x1d"));
    }
    const line = (what: string, samples: number[]) =>
      console.log(
        `${what.padEnd(58)} p50 ${ms(percentile(samples, 50))}  p95 ${ms(percentile(samples, 95))}  (${samples.length})`,
      );
    line("sbx attach → prompt on the screen", attaches);
    line("plain ssh -tt + tmux attach → prompt", plain);
    line("sbx attach from the sources under tsx → prompt", fromSources);
    line("sbx --version (the bundle)", bundleStart);
    line("sbx --version (the sources under tsx)", sourcesStart);
    figures.push(
      {
        figure: "SC-004: sbx attach → the session's prompt on the screen",
        unit: "ms",
        p50: percentile(attaches, 50),
        tail: { label: "p95", value: percentile(attaches, 95) },
        baseline: { label: "plain ssh -tt + tmux attach", p50: percentile(plain, 50) },
        goal: "≤ 500 ms",
        samples: attaches.length,
      },
      {
        figure: "sbx attach from the sources under tsx (before the CLI's bundle)",
        unit: "ms",
        p50: percentile(fromSources, 50),
        tail: { label: "max", value: Math.max(...fromSources) },
        baseline: { label: "sbx attach, the bundle", p50: percentile(attaches, 50) },
        samples: fromSources.length,
      },
      {
        figure: "sbx's own start (sbx --version), the bundle",
        unit: "ms",
        p50: percentile(bundleStart, 50),
        tail: { label: "max", value: Math.max(...bundleStart) },
        baseline: { label: "the sources under tsx", p50: percentile(sourcesStart, 50) },
        samples: bundleStart.length,
      },
    );

    // SC-001: stopped, then sbx start and a prompt until the agent's command has run.
    const cold: { total: number; start: number }[] = [];
    const warm: number[] = [];
    for (let round = 0; round < STARTS; round++) {
      const stopped = await sbx(home, repo, ["stop", "--json"]);
      if (stopped.code !== 0) throw new Error(`sbx stop: ${stopped.stderr}`);
      await waitFor("the project to be stopped", 300_000, async () =>
        (await call("GET", `/projects/${projectId}`, undefined, token)).status === "stopped"
          ? true
          : undefined,
      );
      const t0 = performance.now();
      const again = await sbx(home, repo, ["start", "--json"]);
      if (again.code !== 0) throw new Error(`sbx start: ${again.stderr}`);
      const startMs = performance.now() - t0;
      await agentRuns(
        base,
        token,
        projectId,
        `Please run \`echo started-${round}\` and tell me what it printed.`,
      );
      cold.push({ total: performance.now() - t0, start: startMs });
      warm.push(
        await agentRuns(
          base,
          token,
          projectId,
          `Please run \`echo running-${round}\` and say what it printed.`,
        ),
      );
      console.log(
        `round ${round + 1}: sbx start ${ms(startMs)}, then the agent's first command's output at ${ms(cold.at(-1)!.total)}; ` +
          `the same prompt to the running sandbox ${ms(warm.at(-1)!)}`,
      );
    }
    const totals = cold.map((c) => c.total);
    figures.push(
      {
        figure: "SC-001: sbx start of a stopped project → the agent's first command's output",
        unit: "s",
        p50: percentile(totals, 50) / 1000,
        tail: { label: "max", value: Math.max(...totals) / 1000 },
        baseline: { label: "the same prompt to the running sandbox", p50: percentile(warm, 50) / 1000 },
        goal: "≤ 30 s",
        samples: totals.length,
      },
      {
        figure: "sbx start of a stopped project, to its exit (in SC-001)",
        unit: "s",
        p50:
          percentile(
            cold.map((c) => c.start),
            50,
          ) / 1000,
        tail: { label: "max", value: Math.max(...cold.map((c) => c.start)) / 1000 },
        samples: cold.length,
      },
    );
    report("sbx-agent", figures);
  } finally {
    if (started) await sbx(home, repo, ["rm", "--yes"]).catch(() => undefined);
    await service?.stop();
    await platform.stop();
    await stub.close();
    await fs.rm(work, { recursive: true, force: true });
  }
}

await main();
