// The web console in a real browser: headless Debian Chromium driven by playwright-core, against the
// runtime service as `npm run local` runs it (API + reconciler + terminal proxy in one process, real
// sandboxes). Sign up → create (the key shown once, downloadable) → running → token refresh → terminal
// round trip → resize reaching the pty → stop closes the terminal (4410) → start → delete, nothing left →
// an API key made, listed and revoked.
import { execFile } from "node:child_process";
import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";

const execFileAsync = promisify(execFile);
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = path.join(REPO_ROOT, "test-artifacts");
const TOKENS_KEY = "agent-sandbox.tokens";
// The page's storage, as the callbacks passed to page.evaluate see it (they run in the browser).
declare const localStorage: {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
};

let platform: TestPlatform;
let service: RuntimeProcess | undefined;
let browser: Browser | undefined;
let base: string;

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `no Chromium at ${CHROMIUM}: run the suite with 'npm test' (it installs Debian's chromium)`,
    );
  await fs.mkdir(ARTIFACTS, { recursive: true });
  // The runtime serves dist/web: build it from the sources under test (about 2 s).
  await execFileAsync("npm", ["run", "--silent", "build:web"], { cwd: REPO_ROOT });
  platform = await testPlatform({
    subnetPool: "10.228.0.0/23",
    sshPortRange: [28800, 28820],
    leaseSeconds: 10,
  });
  const { host, tenants } = platform.config;
  service = await startRuntime(
    "web-console",
    {
      host,
      tenants: {
        image: tenants.image,
        subnetPool: "10.228.0.0/23",
        sshPortRange: [28800, 28820],
        leaseSeconds: 10,
      },
    },
    { logFile: path.join(ARTIFACTS, "web-console-runtime.log") },
  );
  base = service.base;
  const index = await fetch(`${base}/`);
  if (index.status !== 200 || !(await index.text()).includes("/assets/"))
    throw new Error(
      `the runtime does not serve the web console at / (${index.status}): is registerWebConsole wired?`,
    );
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // Root in a container: Chromium's own sandbox needs user namespaces it cannot have here.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}, 900_000);

afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await platform?.stop();
}, 300_000);

/** The terminal's rows as text (xterm's DOM renderer: one div per row, spaces as no-break spaces). */
async function screen(page: Page): Promise<string[]> {
  return page.$$eval(".xterm-rows > div", (rows) =>
    rows.map((row) => (row.textContent ?? "").replaceAll("\u00a0", " ").trimEnd()),
  );
}

async function untilScreen(page: Page, pattern: RegExp, timeoutMs = 30_000): Promise<RegExpMatchArray> {
  return waitFor(
    `the terminal to show ${pattern}`,
    timeoutMs,
    async () => (await screen(page)).join("\n").match(pattern) ?? undefined,
  ).catch(async (error: Error) => {
    throw new Error(`${error.message}; the terminal shows:\n${(await screen(page)).join("\n")}`);
  });
}

/** Types a command line into the terminal (as keystrokes, through xterm.js and the socket). */
async function typeLine(page: Page, line: string): Promise<void> {
  await page.locator(".xterm-helper-textarea").focus();
  await page.keyboard.type(line);
  await page.keyboard.press("Enter");
}

/** The pty's size as the shell sees it (tmux passes the window size on to the pane). */
async function ptySize(page: Page, marker: string): Promise<{ rows: number; cols: number }> {
  await typeLine(page, `echo ${marker}-$(stty size | tr ' ' x)-end`);
  const match = await untilScreen(page, new RegExp(`${marker}-(\\d+)x(\\d+)-end`));
  return { rows: Number(match[1]), cols: Number(match[2]) };
}

/** Every engine and host object of the tenant that still exists. */
const leftovers = (projectId: string) => tenantLeftovers(service!.config.host, projectId);

describe("the web console in Chromium", () => {
  it(
    "sign up, create, terminal round trip and resize, stop/start, delete",
    { timeout: 900_000 },
    async () => {
      const context = await browser!.newContext({
        viewport: { width: 1280, height: 900 },
        acceptDownloads: true,
      });
      const page = await context.newPage();
      const pageErrors: string[] = [];
      const policyViolations: string[] = [];
      page.on("pageerror", (error) => pageErrors.push(error.message));
      page.on("console", (message) => {
        if (message.type() === "error" && /Content Security Policy/i.test(message.text()))
          policyViolations.push(message.text());
      });
      page.on("dialog", (dialog) => void dialog.accept());

      // Signed out: any route lands on the sign-in form; an account is made from there.
      await page.goto(`${base}/#/projects`);
      await page.getByRole("heading", { name: "Sign in" }).waitFor();
      await page.getByRole("link", { name: "Create an account" }).click();
      const email = `browser-${Date.now()}@example.test`;
      await page.getByLabel("Email").fill(email);
      await page.getByLabel("Password").fill("correct horse battery staple");
      await page.getByRole("button", { name: "Create account" }).click();
      await page.getByRole("heading", { name: "Projects" }).waitFor();
      expect(await page.getByTestId("signed-in-as").textContent()).toBe(email);

      // An API error is shown with its message (past the form's own maxlength, the API's rule answers).
      await page.getByLabel("Project name").evaluate((input) => input.removeAttribute("maxlength"));
      await page.getByLabel("Project name").fill("y".repeat(101));
      await page.getByRole("button", { name: "Create project" }).click();
      await page.getByRole("alert").filter({ hasText: "must be at most 100 characters" }).waitFor();

      // Create: the private key is shown once and can be downloaded.
      await page.getByLabel("Project name").fill("browser test");
      await page.getByRole("button", { name: "Create project" }).click();
      const key = await page.getByTestId("private-key").textContent();
      expect(key).toContain("PRIVATE KEY");
      const [download] = await Promise.all([
        page.waitForEvent("download"),
        page.getByRole("button", { name: "Download key" }).click(),
      ]);
      expect(await fs.readFile((await download.path())!, "utf8")).toBe(key);
      await page.getByRole("button", { name: "I saved it" }).click();
      expect(await page.getByTestId("private-key").count()).toBe(0);

      const row = page.locator("tr[data-project-id]", { hasText: "browser test" });
      const projectId = (await row.getAttribute("data-project-id"))!;
      expect(projectId).toMatch(/^[0-9a-f-]{36}$/);
      const operations = new Set<string>();
      await waitFor("the project to be running in the list", 240_000, async () => {
        operations.add((await row.getByTestId("operation").textContent()) ?? "");
        const status = await row.getByTestId("status").textContent();
        if (status === "error") throw new Error(`project failed: ${await row.textContent()}`);
        return status === "running" ? true : undefined;
      });
      expect(await row.getByTestId("operation").textContent()).toMatch(/create succeeded/);
      expect([...operations].some((text) => /create (pending|running|succeeded)/.test(text))).toBe(true);
      await page.screenshot({ path: path.join(ARTIFACTS, "web-console-projects.png") });

      // An access token the API refuses: the console refreshes (rotating both tokens) and carries on.
      const tokens = () => page.evaluate((k) => JSON.parse(localStorage.getItem(k) ?? "null"), TOKENS_KEY);
      const before = await tokens();
      await page.evaluate(
        ([k, t]) => localStorage.setItem(k, JSON.stringify({ ...t, access_token: "forged.or.expired" })),
        [TOKENS_KEY, before] as const,
      );
      await page.reload();
      await row.getByTestId("status").filter({ hasText: "running" }).waitFor();
      const after = await tokens();
      expect(after.refresh_token).not.toBe(before.refresh_token);
      expect(after.access_token).not.toBe("forged.or.expired");
      expect(await page.getByTestId("signed-in-as").count()).toBe(1);

      // The project's page: SSH command, and the terminal attached to the sandbox's tmux.
      await row.getByRole("link", { name: "browser test" }).click();
      await page.waitForURL(`${base}/#/projects/${projectId}`);
      const ssh = page.getByTestId("ssh-command");
      await ssh.filter({ hasText: /^ssh / }).waitFor();
      expect(await ssh.textContent()).toMatch(/^ssh -p 288[0-2]\d agent@127\.0\.0\.1$/);
      await page.locator('.terminal-status[data-state="open"]').waitFor({ timeout: 30_000 });
      await typeLine(page, "echo hello-$((6*7))");
      await untilScreen(page, /^hello-42$/m);
      await page.screenshot({ path: path.join(ARTIFACTS, "web-console.png") });

      // A smaller window: the terminal refits, tells the proxy, and the shell's pty follows.
      const rowsBefore = (await screen(page)).length;
      const sizeBefore = await ptySize(page, "size1");
      await page.setViewportSize({ width: 900, height: 700 });
      await waitFor("the terminal to refit", 10_000, async () =>
        (await screen(page)).length < rowsBefore ? true : undefined,
      );
      const rowsAfter = (await screen(page)).length;
      // The resize travels browser → proxy → exec pty → tmux → pane: allow it a moment, asking again.
      let sizeAfter = sizeBefore;
      for (let attempt = 0; attempt < 10 && sizeAfter.cols === sizeBefore.cols; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        sizeAfter = await ptySize(page, `size2${String.fromCharCode(97 + attempt)}`);
      }
      expect(sizeAfter.cols).toBeLessThan(sizeBefore.cols);
      expect(sizeAfter.rows).toBeLessThan(sizeBefore.rows);
      // Whatever tmux keeps for itself (a status line), the pane shrank by as many rows as the terminal.
      expect(sizeBefore.rows - sizeAfter.rows).toBe(rowsBefore - rowsAfter);
      await page.screenshot({ path: path.join(ARTIFACTS, "web-console-resized.png") });

      // Stopping the project ends the session, and the console says why.
      const head = page.locator(".detail-head");
      await head.getByRole("button", { name: "Stop" }).click();
      await page.getByTestId("terminal-closed").filter({ hasText: "4410" }).waitFor({ timeout: 120_000 });
      await head
        .getByTestId("status")
        .filter({ hasText: /^stopped$/ })
        .waitFor({ timeout: 240_000 });
      await head.getByRole("button", { name: "Start" }).click();
      await head
        .getByTestId("status")
        .filter({ hasText: /^running$/ })
        .waitFor({ timeout: 240_000 });
      // Running again: the console connects with a fresh ticket on its own.
      await page.locator('.terminal-status[data-state="open"]').waitFor({ timeout: 30_000 });
      await typeLine(page, "echo again-$((5*5))");
      await untilScreen(page, /^again-25$/m);

      // Delete (confirmed in the dialog): back to the list, the project goes, and so does every resource.
      await head.getByRole("button", { name: "Delete" }).click();
      await page.locator('[data-testid="project-list"][data-loaded="true"]').waitFor();
      await waitFor("the project to leave the list", 240_000, async () =>
        (await page.locator(`tr[data-project-id="${projectId}"]`).count()) === 0 ? true : undefined,
      );
      const listed = await page.evaluate(async (k) => {
        const { access_token } = JSON.parse(localStorage.getItem(k) ?? "{}");
        const response = await fetch("/projects", { headers: { authorization: `Bearer ${access_token}` } });
        return response.json();
      }, TOKENS_KEY);
      expect(listed).toEqual({ projects: [] });
      await waitFor("the tenant's resources to be gone", 60_000, async () =>
        (await leftovers(projectId)).length === 0 ? true : undefined,
      ).catch(async (error: Error) => {
        throw new Error(`${error.message}: ${(await leftovers(projectId)).join(", ")}`);
      });

      // API keys: made (shown once), listed by their first characters, revoked (refused at once after).
      await page.getByRole("link", { name: "API keys" }).click();
      await page.getByRole("heading", { name: "API keys" }).waitFor();
      await page.getByLabel("Key name").fill("browser-key");
      await page.getByRole("button", { name: "Create key" }).click();
      const apiKey = (await page.getByTestId("api-key").textContent())!;
      expect(apiKey).toMatch(/^sbx_[A-Za-z0-9_-]{43}$/);
      const asKey = () => fetch(`${base}/auth/me`, { headers: { "x-api-key": apiKey } });
      expect((await asKey()).status).toBe(200);
      await page.getByRole("button", { name: "I saved it" }).click();
      expect(await page.getByTestId("api-key").count()).toBe(0);
      const keyRow = page.locator("tr[data-api-key-id]", { hasText: "browser-key" });
      expect(await keyRow.textContent()).toContain(`${apiKey.slice(0, 12)}…`);
      expect(await page.locator("body").textContent()).not.toContain(apiKey);
      await keyRow.getByRole("button", { name: "Revoke" }).click();
      await waitFor("the key to leave the list", 10_000, async () =>
        (await keyRow.count()) === 0 ? true : undefined,
      );
      expect((await asKey()).status).toBe(401);

      expect(pageErrors).toEqual([]);
      expect(policyViolations).toEqual([]);
      await context.close();
    },
  );
});
