// The agent CLIs finish a task without a prompt (issue 45): in one real sandbox, each agent as the image ships it
// (its no-prompt wrapper) is typed into a window of the sandbox's tmux session, as a person at the terminal would
// type it, and asked to run a command. The test reads that window: the model's final answer naming what the command
// printed, the line's exit status 0, and never a question to approve anything on the way; the command's own marker
// file says it really ran. Each model is a stub of its provider's API (TLS with its own CA) that the credential
// gateway is pointed at: the model got the project's key, the sandbox only ever had the placeholder. Real
// reconciler, engine, provider, iptables, Squid and gateway.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { GATEWAY_PLACEHOLDER } from "../../components/tenant/secrets.js";
import { waitFor } from "../../lib/process.js";
import { CredentialGateway, credentialGatewayOptions } from "../../runtime/gateway/gateway.js";
import { SecretBox } from "../../runtime/secrets.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { docker, execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { startModelStub, type ModelStub } from "../helpers/model-stub.js";
import { startGeminiStub, type GeminiModelStub } from "../helpers/model-stub-gemini.js";
import { startOpenAiModelStub, type OpenAiModelStub } from "../helpers/model-stub-openai.js";
import { testDatabase } from "../helpers/postgres.js";

const SUBNETS = "10.224.0.0/23";
const SSH_PORTS: [number, number] = [29060, 29065];
const GATEWAY_PORT = 3180;
const anthropicKey = `sk-ant-headless-${randomBytes(12).toString("hex")}`;
const openAiKey = `sk-openai-headless-${randomBytes(12).toString("hex")}`;
const geminiKey = `gemini-headless-${randomBytes(12).toString("hex")}`;
/** How long one agent may take for its task: two model round trips and a command, on a busy 2-core machine. */
const TASK_MS = 300_000;

/**
 * What these CLIs print when they do stop to ask (Claude Code's "Do you want to proceed?" and its folder-trust
 * question, Codex's "Would you like to run the following command?" and "Allow command?", Gemini CLI's "Allow
 * execution of", "Yes, and don't ask again", a shell's `[y/N]`). Not "approval": Codex's own banner says
 * `approval: never`.
 */
const ASKING = [
  /Do you (want|trust)/,
  /Would you like to/,
  /\bAllow\b/,
  /\bapprove\b/i,
  /\bpermission\b/i,
  /\[y\/n\]/i,
  /don't ask again/i,
  /Yes, proceed/,
];

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let gateway: CredentialGateway;
let anthropic: ModelStub;
let openai: OpenAiModelStub;
let gemini: GeminiModelStub;
let certs: string;
let projectId = "";
const container = () => tenantNames(projectId).container;

/** PUT a secret and wait for the update it queued. */
async function putSecret(name: string, value: string): Promise<void> {
  const answer = await h.as("alice", "PUT", `/projects/${projectId}/secrets/${name}`, { value });
  expect(answer.statusCode, answer.body).toBe(202);
  const { operation } = answer.json();
  await waitFor(`the update for ${name}`, 300_000, async () => {
    const { rows } = await h.db.query<{ state: string; error: string | null }>(
      "select state, error from operations where id = $1",
      [operation.id],
    );
    if (rows[0]?.state === "failed") throw new Error(`the update failed: ${rows[0].error}`);
    return rows[0]?.state === "succeeded" ? true : undefined;
  });
}

/** tmux in the sandbox, as the agent (arguments as they are: no shell between). */
const tmux = (...args: string[]) =>
  docker("exec", "-u", "agent", "-w", "/home/agent", container(), "tmux", ...args);

interface TerminalRun {
  /** The window's text, wrapped lines joined, from the first line of its history. */
  readonly pane: string;
  /** `$?` of the line typed. */
  readonly exitCode: number;
}

/**
 * Types `commandLine` into a new window `window` of the sandbox's tmux session `main` (the one the browser and SSH
 * attach to; made if no one has yet), then Enter, then reads the window until the line's exit status shows. A
 * question to approve something, on any read, ends the wait at once: nobody would answer it.
 */
async function runInTerminal(window: string, commandLine: string): Promise<TerminalRun> {
  await execIn(
    container(),
    "tmux has-session -t =main 2>/dev/null || tmux new-session -d -s main -x 200 -y 50",
  );
  await tmux("new-window", "-d", "-t", "=main:", "-n", window, "-c", "/home/agent");
  const target = `=main:${window}`;
  const read = () => tmux("capture-pane", "-p", "-J", "-t", target, "-S", "-");
  // The login shell's prompt first (its profile exports the gateway's variables), then the line.
  await waitFor(`a shell in window ${window}`, 60_000, async () =>
    (await read()).includes("$") ? true : undefined,
  );
  await tmux("send-keys", "-t", target, "-l", "--", `${commandLine}; echo "exit=$?"`);
  await tmux("send-keys", "-t", target, "Enter");
  let pane = "";
  const ended = await waitFor(`the line in window ${window} to end`, TASK_MS, async () => {
    pane = await read();
    // What was typed is not what the agent printed.
    const printed = pane.replace(commandLine, "");
    const asking = ASKING.find((words) => words.test(printed));
    if (asking) return { asking };
    const status = printed.match(/^exit=(\d+)$/m);
    return status ? { exitCode: Number(status[1]) } : undefined;
  }).catch((error: Error) => {
    throw new Error(`${error.message}\nwindow ${window}:\n${pane}`);
  });
  if ("asking" in ended) throw new Error(`window ${window} asked (${ended.asking}):\n${pane}`);
  const { exitCode } = ended;
  console.log(`agents-headless: window ${window}:\n${pane}`);
  return { pane, exitCode };
}

/**
 * Asks `agent` (the line a person types to give it a prompt: the image's no-prompt wrapper) to run a command that
 * prints a marker and writes it to a file, and checks what the terminal showed: the model's answer naming the
 * marker, exit 0, no question; and the file. Returns the marker, for the case to check what its model was asked.
 */
async function headlessTask(name: string, agent: (prompt: string) => string): Promise<string> {
  const marker = `agent-did-it-${randomBytes(4).toString("hex")}`;
  const file = `/tmp/marker-${name}`;
  const { pane, exitCode } = await runInTerminal(name, agent(`run \`echo ${marker} | tee ${file}\``));
  expect(pane).toContain(`The command printed: ${marker}.`);
  expect(exitCode, pane).toBe(0);
  expect((await execIn(container(), `cat ${file}`)).stdout).toBe(marker);
  // The search the cases make for their keys finds what is inside: this file, the agent's processes.
  expect(inSandbox(marker).files.split("\n")).toContain(file);
  expect(inSandbox("HOME=/home/agent").processes).toBeGreaterThan(0);
  return marker;
}

/**
 * Where `value` is in the sandbox: the files that hold it, and how many of its processes' environments and command
 * lines do. It goes to grep on stdin: on a command line it would be in a process inside.
 */
function inSandbox(value: string): { files: string; processes: number } {
  const search = (script: string) =>
    spawnSync("docker", ["exec", "-i", "-u", "root", container(), "sh", "-c", script], {
      input: `${value}\n`,
      encoding: "utf8",
    }).stdout.trim();
  return {
    files: search("grep -rlaF --no-messages -f /dev/stdin /run /etc /home /tmp /var /root /opt"),
    processes: Number(
      search(
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; echo; done 2>/dev/null > /tmp/.procs; grep -caF -f /dev/stdin /tmp/.procs; rm -f /tmp/.procs",
      ),
    ),
  };
}

beforeAll(async () => {
  [anthropic, openai, gemini] = await Promise.all([
    startModelStub(),
    startOpenAiModelStub(),
    startGeminiStub(),
  ]);
  // The gateway trusts one CA file: each stub's own CA, together.
  const stubs = [anthropic, openai, gemini];
  certs = await fs.mkdtemp(path.join(os.tmpdir(), "agents-headless-"));
  const caFile = path.join(certs, "stubs-ca.pem");
  await fs.writeFile(caFile, (await Promise.all(stubs.map((s) => fs.readFile(s.caFile, "utf8")))).join(""));
  platform = await testPlatform({
    subnetPool: SUBNETS,
    sshPortRange: SSH_PORTS,
    leaseSeconds: 10,
    credentialGateway: {
      port: GATEWAY_PORT,
      upstreams: {},
      caFile,
      resolve: Object.fromEntries(stubs.map((s) => [s.host, s.address])),
      maxConcurrentRequests: 16,
      headersTimeoutSeconds: 20,
    },
  });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  gateway = new CredentialGateway({
    db: h.db,
    box: SecretBox.fromDataDir(platform.config.host.dataDir),
    ...credentialGatewayOptions(platform.config.tenants.credentialGateway)!,
    syncMs: 500,
  });
  await gateway.start();
  const created = await h.as("alice", "POST", "/projects", { name: "agents-headless" });
  expect(created.statusCode, created.body).toBeLessThan(300);
  projectId = created.json().project_id;
  await h.waitForStatus("alice", projectId, "running", 600_000);
  await putSecret("ANTHROPIC_API_KEY", anthropicKey);
  await putSecret("OPENAI_API_KEY", openAiKey);
  await putSecret("GEMINI_API_KEY", geminiKey);
  await waitFor("the gateway listening for the project", 30_000, async () =>
    [...gateway.addresses.values()].includes(projectId) ? true : undefined,
  );
}, 1_200_000);

afterAll(async () => {
  await gateway?.close();
  await h?.close();
  // Closing the harness deleted the project's tenant: its sandbox is gone with it.
  if (projectId) expect(await docker("ps", "-aq", "--filter", `name=^${container()}$`)).toBe("");
  await platform?.stop();
  await anthropic?.close();
  await openai?.close();
  await gemini?.close();
  if (certs) await fs.rm(certs, { recursive: true, force: true });
}, 900_000);

describe("the agent CLIs with no prompt, in the sandbox's terminal", () => {
  it("Claude Code (freeclaude -p) runs the command and answers", async () => {
    const before = anthropic.messages().length;
    const marker = await headlessTask("claude", (prompt) => `freeclaude -p '${prompt}'`);
    const asked = anthropic.messages().slice(before);
    expect(asked.length).toBeGreaterThanOrEqual(2);
    for (const request of asked) expect(request.headers["x-api-key"]).toBe(anthropicKey);
    // The command's output went back to the model: that is where its answer came from.
    expect(JSON.stringify(asked.map((r) => r.body))).toContain(`"tool_result"`);
    expect(JSON.stringify(asked.at(-1)!.body)).toContain(marker);
    expect(inSandbox(anthropicKey)).toEqual({ files: "", processes: 0 });
    expect((await execIn(container(), "bash -lc 'printf %s \"$ANTHROPIC_API_KEY\"'")).stdout).toBe(
      GATEWAY_PLACEHOLDER,
    );
  }, 600_000);

  it("Codex (freecodex exec) runs the command and answers", async () => {
    const before = openai.requests.length;
    const marker = await headlessTask(
      "codex",
      (prompt) => `freecodex exec --skip-git-repo-check '${prompt}'`,
    );
    // Server-sent events over HTTPS only: the provider the image's wrapper names has no WebSocket transport
    // (a WebSocket's GET would come through the gateway as a plain request), and asks for no model list.
    const asked = openai.requests.slice(before);
    expect(asked.map((r) => `${r.method} ${r.url}`)).toEqual(asked.map(() => "POST /v1/responses"));
    expect(asked.length).toBeGreaterThanOrEqual(2);
    for (const request of asked) expect(request.headers.authorization).toBe(`Bearer ${openAiKey}`);
    // Codex ran the stub's tool call and sent back what the command printed.
    const last = JSON.stringify(asked.at(-1)!.body);
    expect(last).toMatch(/"type":"(custom_tool_call|function_call)_output"/);
    expect(last).toContain(`${marker}\\n`);
    expect(inSandbox(openAiKey)).toEqual({ files: "", processes: 0 });
    expect((await execIn(container(), "bash -lc 'printf %s \"$OPENAI_API_KEY\"'")).stdout).toBe(
      GATEWAY_PLACEHOLDER,
    );
    const log = (await h.as("alice", "GET", `/projects/${projectId}/gateway/requests`)).json().requests;
    expect(
      log.filter(
        (r: { provider: string; path: string; status: number }) =>
          r.provider === "openai" && r.path === "/v1/responses" && r.status === 200,
      ).length,
    ).toBeGreaterThanOrEqual(2);
  }, 600_000);

  it("Gemini CLI (freegemini -p) runs the command and answers", async () => {
    const before = gemini.requests.length;
    const marker = await headlessTask("gemini", (prompt) => `freegemini -p '${prompt}'`);
    // Its router's classifier (generateContent, JSON in a schema), then the turn and the turn again with the
    // command's output, streamed: every one with the project's key, none with the placeholder.
    const asked = gemini.requests.slice(before);
    expect(asked.length).toBeGreaterThanOrEqual(2);
    for (const request of asked) expect(request.headers["x-goog-api-key"]).toBe(geminiKey);
    const turns = asked.filter((r) => r.url.includes(":streamGenerateContent"));
    expect(turns.length, JSON.stringify(asked.map((r) => r.url))).toBeGreaterThanOrEqual(2);
    const last = JSON.stringify(turns.at(-1)!.body);
    expect(last).toContain('"functionResponse"');
    expect(last).toContain(`Output: ${marker}`);
    expect(inSandbox(geminiKey)).toEqual({ files: "", processes: 0 });
    expect((await execIn(container(), "bash -lc 'printf %s \"$GEMINI_API_KEY\"'")).stdout).toBe(
      GATEWAY_PLACEHOLDER,
    );
    const log = (await h.as("alice", "GET", `/projects/${projectId}/gateway/requests`)).json().requests;
    expect(
      log.filter((r: { provider: string; status: number }) => r.provider === "gemini" && r.status === 200)
        .length,
    ).toBeGreaterThanOrEqual(2);
  }, 600_000);
});
