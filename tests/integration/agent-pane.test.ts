// The agent beside the terminal (issue 46): the runtime as `npm run local` runs it, a real sandbox, the real
// Claude Code CLI of the sandbox image in print mode, the credential gateway, and a stub of Anthropic's
// Messages API (tests/helpers/model-stub.ts, TLS with its own CA) that the gateway is pointed at. A prompt asks
// the agent to run a command: the answer streams back, the command shows in the turn's events, in the
// terminal's `agent` window and in the audit, and the model got the project's key while the sandbox never had
// it. Bad input: an empty, blank or oversized prompt, an unknown agent, a second turn while one runs, a stream
// cut mid-answer (resumed from its last event), a stop, a stopped sandbox. Then in Chromium on a phone: the
// Agent tab, a prompt, the answer, the Terminal tab showing the command; a session that expires keeps the typed
// prompt through the login. Screenshots in test-artifacts/agent-pane-*.png.
import { randomBytes } from "node:crypto";
import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { webConsoleBuilt } from "../helpers/web-console-build.js";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { startModelStub, type ModelStub } from "../helpers/model-stub.js";
import { tcpRelay } from "../helpers/tcp-relay.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = path.join(REPO_ROOT, "test-artifacts");
const SUBNETS = "10.234.0.0/23";
const SSH_PORTS: [number, number] = [29040, 29046];
const PASSWORD = "agent-pane-password-1";
const EMAIL = `agent-pane-${randomBytes(4).toString("hex")}@example.com`;
const realKey = `sk-ant-pane-${randomBytes(12).toString("hex")}`;
declare const localStorage: { setItem(key: string, value: string): void };
// The page's layout shifts, as the callback passed to addInitScript sees them (it runs in the browser).
declare const window: { layoutShift: number; shifted: string[] };
interface ShiftEntry {
  value: number;
  hadRecentInput: boolean;
  sources?: { node?: { nodeName: string; className?: unknown } | null }[];
}
declare class PerformanceObserver {
  constructor(callback: (list: { getEntries(): ShiftEntry[] }) => void);
  observe(options: { type: string; buffered: boolean }): void;
}

let platform: TestPlatform;
let service: RuntimeProcess | undefined;
let stub: ModelStub;
let browser: Browser | undefined;
let token = "";
let projectId = "";

interface Answer {
  readonly status: number;
  readonly body: string;
  json(): any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function api(method: string, url: string, body?: unknown, as = token): Promise<Answer> {
  const response = await fetch(`${service!.base}${url}`, {
    method,
    headers: {
      ...(as ? { authorization: `Bearer ${as}` } : {}),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text, json: () => JSON.parse(text) };
}

interface TurnEvent {
  seq: number;
  type: string;
  [field: string]: unknown;
}

/** A turn's NDJSON events as they come; `stopAfter` ends the read early (the connection dropped). */
async function turnEvents(
  url: string,
  init: RequestInit,
  stopAfter?: (event: TurnEvent) => boolean,
): Promise<{ status: number; events: TurnEvent[]; body?: string }> {
  const controller = new AbortController();
  const response = await fetch(`${service!.base}${url}`, {
    ...init,
    signal: controller.signal,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
  });
  if (response.status !== 200) return { status: response.status, events: [], body: await response.text() };
  expect(response.headers.get("content-type")).toMatch(/^application\/x-ndjson/);
  const events: TurnEvent[] = [];
  const decoder = new TextDecoder();
  let pending = "";
  const reader = response.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n")) >= 0) {
      const event = JSON.parse(pending.slice(0, at)) as TurnEvent;
      pending = pending.slice(at + 1);
      events.push(event);
      if (stopAfter?.(event)) {
        controller.abort();
        return { status: 200, events };
      }
    }
  }
  return { status: 200, events };
}

const ask = (prompt: string, stopAfter?: (event: TurnEvent) => boolean) =>
  turnEvents(
    `/projects/${projectId}/agent/turns`,
    { method: "POST", body: JSON.stringify({ prompt }) },
    stopAfter,
  );

/** Waits for the project's newest operation `operationId` to succeed. */
async function operationDone(operationId: string): Promise<void> {
  await waitFor(`operation ${operationId}`, 600_000, async () => {
    const project = (await api("GET", `/projects/${projectId}`)).json();
    if (project.operation?.id !== operationId) return undefined;
    if (project.operation.state === "failed") throw new Error(`failed: ${JSON.stringify(project.operation)}`);
    return project.operation.state === "succeeded" ? true : undefined;
  });
}

async function statusIs(status: string): Promise<void> {
  await waitFor(`the project to be ${status}`, 600_000, async () => {
    const project = (await api("GET", `/projects/${projectId}`)).json();
    if (project.status === "error") throw new Error(`the project failed: ${JSON.stringify(project)}`);
    return project.status === status ? true : undefined;
  });
}

const container = () => tenantNames(projectId).container;
const agentWindow = async () =>
  (await execIn(container(), "tmux capture-pane -p -J -t main:agent -S -300 2>&1")).stdout;

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `no Chromium at ${CHROMIUM}: run the suite with 'npm test' (it installs Debian's chromium)`,
    );
  await fs.mkdir(ARTIFACTS, { recursive: true });
  // The runtime serves dist/web: built from the sources under test, when they changed (about 2 s).
  await webConsoleBuilt();
  stub = await startModelStub();
  const gateway = {
    port: 3180,
    upstreams: {},
    caFile: stub.caFile,
    resolve: { [stub.host]: stub.address },
    maxConcurrentRequests: 16,
    headersTimeoutSeconds: 20,
  };
  platform = await testPlatform({
    subnetPool: SUBNETS,
    sshPortRange: SSH_PORTS,
    leaseSeconds: 10,
    credentialGateway: gateway,
  });
  const { host, tenants } = platform.config;
  service = await startRuntime(
    "agent-pane",
    {
      host,
      tenants: {
        image: tenants.image,
        subnetPool: SUBNETS,
        sshPortRange: SSH_PORTS,
        leaseSeconds: 10,
        credentialGateway: gateway,
      },
    },
    { logFile: path.join(ARTIFACTS, "agent-pane-runtime.log") },
  );
  expect((await api("POST", "/auth/register", { email: EMAIL, password: PASSWORD }, "")).status).toBe(201);
  token = (await api("POST", "/auth/login", { email: EMAIL, password: PASSWORD }, "")).json().access_token;
  const created = await api("POST", "/projects", { name: "agent-pane" });
  expect(created.status, created.body).toBeLessThan(300);
  projectId = created.json().project_id;
  await statusIs("running");
  const secret = await api("PUT", `/projects/${projectId}/secrets/ANTHROPIC_API_KEY`, { value: realKey });
  expect(secret.status, secret.body).toBe(202);
  await operationDone(secret.json().operation.id);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}, 1_200_000);

afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await platform?.stop();
  await stub?.close();
}, 600_000);

describe("the agent pane's API", () => {
  it("a prompt streams the agent's answer; the command it ran is in the events, the terminal and the audit", async () => {
    const command = "echo agent-was-here-$((6*7))";
    const { status, events, body } = await ask(`Please run \`${command}\` and tell me what it printed.`);
    expect(status, body).toBe(200);
    const types = events.map((e) => e.type);
    expect(types[0]).toBe("turn");
    expect(types.at(-1)).toBe("end");
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i));
    const turnId = events[0]!.turn_id as string;
    expect(events[0]).toMatchObject({
      agent: "claude",
      prompt: `Please run \`${command}\` and tell me what it printed.`,
    });
    const end = events.at(-1)!;
    expect(end, JSON.stringify(events)).toMatchObject({ exit_code: 0, timed_out: false, killed_by: null });
    // What the agent did, in order: said it would, ran the command, read its output, answered.
    expect(events.filter((e) => e.type === "command")).toEqual([
      expect.objectContaining({ tool: "Bash", command }),
    ]);
    expect(events.find((e) => e.type === "output")).toMatchObject({
      text: "agent-was-here-42",
      is_error: false,
    });
    const answer = events
      .filter((e) => e.type === "text")
      .map((e) => e.text)
      .join("");
    expect(answer).toContain("I will run it.");
    expect(answer).toContain("The command printed: agent-was-here-42.");
    expect(events.find((e) => e.type === "result")).toMatchObject({
      is_error: false,
      text: expect.stringContaining("The command printed: agent-was-here-42."),
    });

    // The model was asked through the gateway, with the project's key; the sandbox sent only the placeholder.
    const asked = stub.messages();
    expect(asked.length).toBeGreaterThanOrEqual(2);
    for (const request of asked) expect(request.headers["x-api-key"]).toBe(realKey);
    expect(JSON.stringify(asked.map((r) => r.body))).toContain(command);
    const log = (await api("GET", `/projects/${projectId}/gateway/requests`)).json().requests;
    expect(
      log.some((r: { path: string; status: number }) => r.path === "/v1/messages" && r.status === 200),
    ).toBe(true);

    // The terminal: the session's `agent` window shows the prompt, the command and what it printed.
    const window = await agentWindow();
    expect(window).toContain(`$ ${command}`);
    expect(window).toContain("agent-was-here-42");
    expect(window).toContain("✓ done");

    // The audit: the prompt and the command, in the turn's own session, listed with the terminal's.
    const audit = (await api("GET", `/projects/${projectId}/audit?session=${turnId}`)).json().entries;
    expect(audit.map((e: { kind: string; text: string }) => [e.kind, e.text])).toEqual([
      ["agent_prompt", `Please run \`${command}\` and tell me what it printed.`],
      ["agent_command", command],
    ]);
    const sessions = (await api("GET", `/projects/${projectId}/sessions`)).json().sessions;
    expect(sessions.find((s: { session_id: string }) => s.session_id === turnId)).toMatchObject({
      kind: "agent",
      end_code: 0,
    });
    const recording = await api("GET", `/projects/${projectId}/sessions/${turnId}`);
    expect(recording.status).toBe(200);
    expect(recording.body).toContain(command);
    // And the exec audit has the command that ran the turn (never the prompt: it went on stdin).
    const execs = (await api("GET", `/projects/${projectId}/execs`)).json().execs;
    expect(execs[0].command).toEqual(["bash", "-lc", 'exec sandbox-agent-turn "$0" "$1"', "claude", turnId]);
    expect(JSON.stringify(execs)).not.toContain("agent-was-here");
  }, 600_000);

  it("bad input is a 400 naming the field; another user's project is a 404", async () => {
    const cases: [unknown, string][] = [
      [{ prompt: "" }, "prompt"],
      [{ prompt: " \n\t " }, "prompt"],
      [{ prompt: "x".repeat(32_769) }, "32768"],
      [{ prompt: "hi", agent: "gpt" }, "agent"],
      [{ prompt: "hi", model: "opus" }, "model"],
      [{}, "prompt"],
    ];
    for (const [body, named] of cases) {
      const answer = await api("POST", `/projects/${projectId}/agent/turns`, body);
      expect(answer.status, answer.body).toBe(400);
      expect(answer.body).toContain(named);
    }
    const other = `agent-pane-other-${randomBytes(3).toString("hex")}@example.com`;
    await api("POST", "/auth/register", { email: other, password: PASSWORD }, "");
    const theirs = (await api("POST", "/auth/login", { email: other, password: PASSWORD }, "")).json()
      .access_token;
    expect((await api("POST", `/projects/${projectId}/agent/turns`, { prompt: "hi" }, theirs)).status).toBe(
      404,
    );
    expect((await api("GET", `/projects/${projectId}/agent/turns`, undefined, theirs)).status).toBe(404);
  });

  it("a stream cut mid-answer resumes from its last event; a second prompt meanwhile is a 409 naming the turn; a stop ends it", async () => {
    const release = stub.holdNext();
    // The connection drops right after the first words of the answer.
    const first = await ask("Please run `echo resumed-$((2+3))`.", (event) => event.type === "text");
    expect(first.status, first.body).toBe(200);
    const turnId = first.events[0]!.turn_id as string;
    const last = first.events.at(-1)!.seq;
    const again = await api("POST", `/projects/${projectId}/agent/turns`, { prompt: "and another" });
    expect(again.status, again.body).toBe(409);
    expect(again.json()).toMatchObject({ error: "turn_running" });
    expect(again.body).toContain(turnId);
    const listed = (await api("GET", `/projects/${projectId}/agent/turns`)).json().turns;
    expect(listed[0]).toMatchObject({ turn_id: turnId, running: true });
    release();
    const rest = await turnEvents(`/projects/${projectId}/agent/turns/${turnId}/events?after=${last}`, {
      method: "GET",
    });
    expect(rest.status, rest.body).toBe(200);
    // Every event once: the first stream's and the resumed one's together are the turn, in order.
    const all = [...first.events, ...rest.events];
    expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i));
    expect(all.at(-1)).toMatchObject({ type: "end", exit_code: 0 });
    expect(all.find((e) => e.type === "output")).toMatchObject({ text: "resumed-5" });
    // Read again from the start, the same turn.
    const replay = await turnEvents(`/projects/${projectId}/agent/turns/${turnId}/events`, { method: "GET" });
    expect(replay.events).toEqual(all);
    // An unknown turn, or a bad id, is named.
    const unknown = await api("GET", `/projects/${projectId}/agent/turns/${crypto.randomUUID()}/events`);
    expect(unknown.status).toBe(404);
    expect((await api("GET", `/projects/${projectId}/agent/turns/nope/events`)).body).toContain("turnId");

    // A turn held in the middle, stopped: its processes go, its end says so.
    const releaseStopped = stub.holdNext();
    const held = await ask("Please run `echo never-$((1+1))`.", (event) => event.type === "text");
    const heldId = held.events[0]!.turn_id as string;
    const stopped = await api("DELETE", `/projects/${projectId}/agent/turns/${heldId}`);
    releaseStopped();
    expect(stopped.status, stopped.body).toBe(200);
    expect(stopped.json()).toMatchObject({ running: false });
    const ended = await turnEvents(`/projects/${projectId}/agent/turns/${heldId}/events`, { method: "GET" });
    expect(ended.events.at(-1)).toMatchObject({ type: "end", killed_by: "stopped" });
    expect(ended.events.some((e) => e.type === "output")).toBe(false);
    const left = await execIn(container(), "pgrep -u agent -f '[s]andbox-agent-turn|[c]laude -p' || true");
    expect(left.stdout).toBe("");
  }, 600_000);
});

/** Signs in through the console's form at `origin`, as the test's user. */
async function signIn(page: Page, origin: string): Promise<void> {
  await page.goto(`${origin}/#/login`);
  await page.getByLabel("Email").fill(EMAIL);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Projects" }).waitFor();
}

describe("the agent pane on a phone", () => {
  /** The terminal's rows as text. */
  const screen = (page: Page) =>
    page.$$eval(".xterm-rows > div", (rows) =>
      rows.map((row) => (row.textContent ?? "").replaceAll("\u00a0", " ").trimEnd()).join("\n"),
    );
  const shot = (page: Page, name: string) =>
    page.screenshot({ path: path.join(ARTIFACTS, `agent-pane-${name}.png`) });

  it("the Agent tab asks, streams the answer, and the Terminal tab shows the command; an expired session keeps the prompt", async () => {
    const context = await browser!.newContext({
      viewport: { width: 360, height: 780 },
      isMobile: true,
      hasTouch: true,
      deviceScaleFactor: 2,
    });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await signIn(page, service!.base);
    await page.goto(`${service!.base}/#/projects/${projectId}`);
    await page.getByRole("tab", { name: "Agent" }).tap();
    // On a phone the two are tabs: the terminal is hidden while the agent is shown.
    await expect.poll(() => page.locator(".terminal-panel").isVisible()).toBe(false);
    const command = "echo from-the-phone-$((20+3))";
    await page.getByLabel("Prompt to the agent").fill(`Please run \`${command}\`.`);
    await shot(page, "1-prompt");
    const turnsNow = async () =>
      (await api("GET", `/projects/${projectId}/agent/turns`)).json().turns as { running: boolean }[];
    // The project's turns so far (the tests above asked it too).
    const asked = (await turnsNow()).length;
    await page.getByRole("button", { name: "Send" }).tap();
    await page.locator(".agent-command code", { hasText: command }).waitFor({ timeout: 180_000 });
    await page.locator(".agent-answer", { hasText: "The command printed: from-the-phone-23." }).waitFor({
      timeout: 180_000,
    });
    await page.locator(".agent-result", { hasText: /^Done in / }).waitFor();
    await shot(page, "2-answer");
    // The result line is the agent's own last event; its process ends after it (on a busy machine, seconds
    // after: CI of 939b325 read the turn still running at the end of this test). Ended, before the part below
    // counts what was asked.
    await waitFor("the turn's process to end", 120_000, async () =>
      (await turnsNow()).every((t) => !t.running) ? true : undefined,
    );
    // The terminal shows the agent's window, with the same command.
    await page.getByRole("tab", { name: "Terminal" }).tap();
    await waitFor("the terminal to show the agent's command", 60_000, async () =>
      (await screen(page)).includes(`$ ${command}`) ? true : undefined,
    );
    await shot(page, "3-terminal");

    // A prompt typed, then the session expires (its tokens no longer valid): the login, and back with the prompt.
    await page.getByRole("tab", { name: "Agent" }).tap();
    const typed = "Please run `echo typed-before-the-login`.";
    await page.getByLabel("Prompt to the agent").fill(typed);
    await page.evaluate(() =>
      localStorage.setItem(
        "agent-sandbox.tokens",
        JSON.stringify({ access_token: "expired.token.value", refresh_token: "revoked-refresh-token" }),
      ),
    );
    // Whichever asks first finds the session gone: the prompt's Send, or the page's own poll of the project
    // (every 2 s), which may have taken the page to the login already (then there is no Send to tap).
    await page
      .getByRole("button", { name: "Send" })
      .tap({ timeout: 2000 })
      .catch(() => undefined);
    await page.getByRole("button", { name: "Sign in" }).waitFor();
    await shot(page, "4-login");
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("tab", { name: "Agent" }).tap();
    await expect.poll(() => page.getByLabel("Prompt to the agent").inputValue()).toBe(typed);
    await shot(page, "5-prompt-kept");
    // Nothing was asked of the agent while signed out: one turn more than before, the first prompt's, ended.
    const turns = await turnsNow();
    expect(turns).toHaveLength(asked + 1);
    expect(turns.every((t) => !t.running)).toBe(true);
    expect(errors).toEqual([]);
    await context.close();
  }, 600_000);

  it("on a desktop: a network that drops mid-answer, the same turn resumed with every word once; a page reloaded mid-answer follows it; a huge paste stops at the bound; Ctrl+Enter sends; no layout shift", async () => {
    // The console through a relay the test can cut: every connection of the page reset at once.
    const relay = await tcpRelay({ host: "127.0.0.1", port: Number(new URL(service!.base).port) });
    const origin = `http://127.0.0.1:${relay.port}`;
    const context = await browser!.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const page = await context.newPage();
      await page.addInitScript(() => {
        window.layoutShift = 0;
        window.shifted = [];
        new PerformanceObserver((list) => {
          for (const entry of list.getEntries()) {
            if (entry.hadRecentInput) continue;
            window.layoutShift += entry.value;
            // What moved, for the log: a shift past the bound names its elements.
            const nodes = (entry.sources ?? []).map(
              (s) => `${s.node?.nodeName}.${String(s.node?.className ?? "")}`,
            );
            window.shifted.push(`${entry.value.toFixed(4)}: ${nodes.join(", ")}`);
          }
        }).observe({ type: "layout-shift", buffered: true });
      });
      await signIn(page, origin);
      await page.getByRole("link", { name: "agent-pane" }).waitFor();
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const listShift = await page.evaluate(() => window.layoutShift);
      console.log(`agent pane: the project list's cumulative layout shift on load: ${listShift.toFixed(4)}`);
      expect(listShift).toBeLessThan(0.1);
      // The project's page loaded as a document of its own (the hash alone would keep the list's count).
      await page.goto(`${origin}/#/projects/${projectId}`);
      await page.reload();
      // Side by side: both shown, no tabs.
      await page.locator(".agent-panel").waitFor();
      expect(await page.locator(".terminal-panel").isVisible()).toBe(true);
      expect(await page.getByRole("tab", { name: "Agent" }).isVisible()).toBe(false);
      // Loaded (the project's facts and snapshots in), nothing moved under the reader: CLS under 0.1, the
      // threshold of a "good" page.
      await page.getByTestId("ssh-command").filter({ hasText: /^ssh / }).waitFor();
      await page.getByText("No snapshots yet.").waitFor();
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const shift = await page.evaluate(() => window.layoutShift);
      const shifted = await page.evaluate(() => window.shifted);
      console.log(
        `agent pane: the project page's cumulative layout shift on load: ${shift.toFixed(4)} (${shifted.join("; ")})`,
      );
      expect(shift).toBeLessThan(0.1);

      // A paste past the bound is cut at it, and the pane says how much it holds.
      const prompt = page.getByLabel("Prompt to the agent");
      await prompt.fill("y".repeat(40_000));
      expect((await prompt.inputValue()).length).toBe(32_768);
      await page.getByText("32768 / 32768 characters").waitFor();

      // From the keyboard: Ctrl+Enter sends. The answer is held after its first words, and the network drops.
      const release = stub.holdNext();
      const command = "echo through-the-cut-$((4*4))";
      await prompt.fill(`Please run \`${command}\`.`);
      await prompt.focus();
      await page.keyboard.press("Control+Enter");
      const answers = page.locator(".agent-answer");
      await answers.filter({ hasText: /^I will run i/ }).waitFor({ timeout: 120_000 });
      await relay.cut();
      await relay.restore();
      await page
        .locator(".agent-status", { hasText: "The connection was lost mid-answer; resuming" })
        .waitFor();
      await page.screenshot({ path: path.join(ARTIFACTS, "agent-pane-6-cut.png") });
      release();
      await page
        .locator(".agent-answer", { hasText: `The command printed: through-the-cut-16.` })
        .waitFor({ timeout: 120_000 });
      await page
        .locator(".agent-result", { hasText: /^Done in / })
        .last()
        .waitFor();
      await page.screenshot({ path: path.join(ARTIFACTS, "agent-pane-7-resumed.png") });
      // The same turn, every word once: the answer's first part whole, one command, its output.
      const turn = await page.locator(".agent-log > *").allTextContents();
      const fromPrompt = turn.slice(
        turn.findLastIndex((text) => text.includes(command) && text.startsWith("You")),
      );
      expect(fromPrompt).toEqual([
        `YouPlease run \`${command}\`.`,
        "I will run it.",
        `$${command}`,
        "through-the-cut-16",
        "The command printed: through-the-cut-16.",
        expect.stringMatching(/^Done in \d+\.\d s$/),
      ]);
      // The turn's end clears the status line. It comes after the result once the agent's process has exited,
      // which on a loaded machine took past expect.poll's default second (session 48's second full run: the
      // pane still said "The agent is working…" under a finished answer).
      await expect.poll(() => page.locator(".agent-status").textContent(), { timeout: 60_000 }).toBe("");

      // A page reloaded mid-answer follows the turn still running: its prompt, what was said, then the rest.
      const releaseAfterReload = stub.holdNext();
      const next = "echo after-the-reload-$((5*5))";
      await prompt.fill(`Please run \`${next}\`.`);
      await page.getByRole("button", { name: "Send" }).click();
      await answers
        .nth(2)
        .filter({ hasText: /^I will run i/ })
        .waitFor({ timeout: 120_000 });
      await page.reload();
      await page.locator(".agent-prompt", { hasText: next }).waitFor();
      releaseAfterReload();
      await page
        .locator(".agent-answer", { hasText: "The command printed: after-the-reload-25." })
        .waitFor({ timeout: 120_000 });
      // The turn's result line follows its last words (the full run of session 47 read the log in between).
      await page
        .locator(".agent-result", { hasText: /^Done in / })
        .last()
        .waitFor({ timeout: 60_000 });
      expect(await page.locator(".agent-log > *").allTextContents()).toEqual([
        `YouPlease run \`${next}\`.`,
        "I will run it.",
        `$${next}`,
        "after-the-reload-25",
        "The command printed: after-the-reload-25.",
        expect.stringMatching(/^Done in \d+\.\d s$/),
      ]);

      // The pane's Stop ends a turn in the middle: its processes go, the pane says so and takes a prompt again.
      const releaseStopped = stub.holdNext();
      await prompt.fill("Please run `echo never-printed`.");
      await page.getByRole("button", { name: "Send" }).click();
      await answers
        .nth(2)
        .filter({ hasText: /^I will run i/ })
        .waitFor({ timeout: 120_000 });
      await page.getByRole("button", { name: "Stop the agent" }).click();
      await page.locator(".agent-status", { hasText: /^Stopped\.$/ }).waitFor({ timeout: 60_000 });
      releaseStopped();
      expect(await page.getByRole("button", { name: "Send" }).isEnabled()).toBe(true);
      expect(await page.getByRole("button", { name: "Stop the agent" }).isVisible()).toBe(false);
      expect(await page.locator(".agent-output").allTextContents()).not.toContain("never-printed");
    } finally {
      await context.close();
      await relay.close();
    }
  }, 600_000);

  it("a prompt to a stopped sandbox says why it is not asked, in the API and in the pane", async () => {
    const stop = await api("POST", `/projects/${projectId}/stop`);
    expect(stop.status, stop.body).toBe(202);
    await statusIs("stopped");
    const answer = await api("POST", `/projects/${projectId}/agent/turns`, { prompt: "hello" });
    expect(answer.status, answer.body).toBe(409);
    expect(answer.json().error).toBe("sandbox_not_running");
    expect(answer.body).toContain("stopped");
    const context = await browser!.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const page = await context.newPage();
      await signIn(page, service!.base);
      await page.goto(`${service!.base}/#/projects/${projectId}`);
      await page.getByLabel("Prompt to the agent").fill("hello");
      await page.getByRole("button", { name: "Send" }).click();
      const status = page.locator(".agent-status");
      await status.filter({ hasText: "Start the project to ask its agent." }).waitFor();
      expect(await status.textContent()).toContain("stopped");
      // Nothing was lost: the prompt is still there to send once the project runs.
      expect(await page.getByLabel("Prompt to the agent").inputValue()).toBe("hello");
    } finally {
      await context.close();
    }
  }, 600_000);
});
