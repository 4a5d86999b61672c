// The web console in a real browser: headless Debian Chromium driven by playwright-core, against the
// runtime service as `npm run local` runs it (API + reconciler + terminal proxy in one process, real
// sandboxes). Sign up → create (the key shown once, downloadable) → running → token refresh → terminal
// round trip → resize reaching the pty → stop closes the terminal (4410) → start → delete, nothing left →
// an API key made, listed and revoked. Then on a phone (issue 46): 360 px wide, touch, the key bar's Ctrl-C,
// a rotation, the network lost and back with the same shell, a socket cut and retried, the offline page,
// installable.
import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import * as os from "node:os";
import lighthouse from "lighthouse";
import { chromium, type Browser, type Page, type WebSocketRoute } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { webConsoleBuilt } from "../helpers/web-console-build.js";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { freePort } from "../helpers/ports.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = path.join(REPO_ROOT, "test-artifacts");
const TOKENS_KEY = "agent-sandbox.tokens";
// The page's storage, as the callbacks passed to page.evaluate see it (they run in the browser).
declare const localStorage: {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
};
declare const document: {
  documentElement: { scrollWidth: number };
  activeElement: { className: string } | null;
};
declare const window: { innerWidth: number };
declare const navigator: { serviceWorker: { ready: Promise<unknown> } };

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
  // The runtime serves dist/web: built from the sources under test, when they changed (about 2 s).
  await webConsoleBuilt();
  // With the host's registry: the phone's test takes a snapshot from the project's page.
  platform = await testPlatform(
    {
      subnetPool: "10.228.0.0/23",
      sshPortRange: [28800, 28820],
      leaseSeconds: 10,
    },
    { registry: true },
  );
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

/** The page's uncaught errors and policy violations, collected; its dialogs (a delete's confirm) accepted. */
function watched(page: Page): { pageErrors: string[]; policyViolations: string[] } {
  const pageErrors: string[] = [];
  const policyViolations: string[] = [];
  page.on("pageerror", (error) => pageErrors.push(error.message));
  page.on("console", (message) => {
    if (message.type() === "error" && /Content Security Policy/i.test(message.text()))
      policyViolations.push(message.text());
  });
  page.on("dialog", (dialog) => void dialog.accept());
  return { pageErrors, policyViolations };
}

/** The page is no wider than its viewport: nothing to scroll sideways. */
async function fitsWidth(page: Page): Promise<{ scrollWidth: number; innerWidth: number }> {
  return page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
  }));
}

/** The scores Lighthouse's categories must reach on the console's pages (issue 46). */
const LIGHTHOUSE_FLOOR = { accessibility: 0.95, "best-practices": 0.95 } as const;

interface LighthouseRun {
  readonly url: string;
  readonly scores: Record<string, number | null>;
  /** The audits that lost points, with Lighthouse's title: what to mend when a score falls. */
  readonly failing: string[];
}

/**
 * Lighthouse (its Node API, Chromium's own audits) on each of `urls` as a signed-in user on a phone: a
 * browser of its own whose default profile Lighthouse drives over the debugging port, signed in through
 * the console's form first (Lighthouse is told to keep the origin's storage). Each report is kept in
 * test-artifacts/lighthouse-N.json.
 */
async function lighthouseRuns(email: string, password: string, urls: readonly string[]) {
  const port = await freePort();
  const profile = await fs.mkdtemp(path.join(os.tmpdir(), "lighthouse-profile-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-dev-shm-usage", `--remote-debugging-port=${port}`],
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`${base}/#/login`);
    await page.getByLabel("Email").fill(email);
    await page.getByLabel("Password").fill(password);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Projects" }).waitFor();
    await page.evaluate(() => navigator.serviceWorker.ready.then(() => undefined));
    const cdp = await context.newCDPSession(page);
    const manifest = await cdp.send("Page.getAppManifest");
    const { installabilityErrors } = await cdp.send("Page.getInstallabilityErrors");
    const runs: LighthouseRun[] = [];
    for (const [index, url] of urls.entries()) {
      const result = await lighthouse(url, {
        port,
        output: "json",
        logLevel: "error",
        onlyCategories: Object.keys(LIGHTHOUSE_FLOOR),
        disableStorageReset: true,
        // Lighthouse's own limits (30 s to the first paint, 45 s to the load) assume a quiet machine; the
        // suite's runs beside three other files.
        maxWaitForFcp: 120_000,
        maxWaitForLoad: 180_000,
        formFactor: "mobile",
        screenEmulation: { mobile: true, width: 360, height: 780, deviceScaleFactor: 2, disabled: false },
      });
      if (!result) throw new Error(`Lighthouse gave no result for ${url}`);
      await fs.writeFile(path.join(ARTIFACTS, `lighthouse-${index + 1}.json`), String(result.report));
      const { categories, audits, runtimeError } = result.lhr;
      if (runtimeError) throw new Error(`Lighthouse on ${url}: ${runtimeError.code} ${runtimeError.message}`);
      runs.push({
        url,
        scores: Object.fromEntries(Object.entries(categories).map(([id, c]) => [id, c.score])),
        failing: Object.values(categories).flatMap((category) =>
          category.auditRefs
            .filter((ref) => ref.weight > 0 && (audits[ref.id]?.score ?? 1) < 1)
            .map((ref) => `${category.id}/${ref.id}: ${audits[ref.id]!.title}`),
        ),
      });
    }
    return { manifest, installabilityErrors, runs };
  } finally {
    await context.close();
    await fs.rm(profile, { recursive: true, force: true });
  }
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
      const { pageErrors, policyViolations } = watched(page);

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

      // A snapshot from the list whose whole run the page does not see: its polls of the list are held until
      // the operation has succeeded (asked of the API here), so the row's status never leaves `running`. The
      // group the tap disabled is usable again once the row shows the operation (it stayed disabled before).
      let release = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      await page.route(`${base}/projects`, async (route) => {
        await held;
        await route.continue();
      });
      await row.getByRole("button", { name: "Snapshot" }).click();
      const { access_token } = await tokens();
      await waitFor("the snapshot to succeed", 600_000, async () => {
        const response = await fetch(`${base}/projects/${projectId}`, {
          headers: { authorization: `Bearer ${access_token}` },
        });
        const { operation } = (await response.json()) as {
          operation: { kind: string; state: string } | null;
        };
        if (operation?.kind === "snapshot" && operation.state === "failed")
          throw new Error("the snapshot failed");
        return operation?.kind === "snapshot" && operation.state === "succeeded" ? true : undefined;
      });
      release();
      await page.unrouteAll({ behavior: "wait" }); // the held polls go on first
      await row
        .getByTestId("operation")
        .filter({ hasText: /^snapshot succeeded/ })
        .waitFor({ timeout: 30_000 });
      for (const action of ["Stop", "Snapshot", "Delete"])
        await expect
          .poll(() => row.getByRole("button", { name: action }).isEnabled(), { timeout: 10_000 })
          .toBe(true);

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

      // A smaller window: the terminal refits, tells the proxy, and the shell's pty follows. (Still wide
      // enough for the agent pane beside the terminal: below 1100 px the two are tabs, the terminal wider.)
      const rowsBefore = (await screen(page)).length;
      const sizeBefore = await ptySize(page, "size1");
      await page.setViewportSize({ width: 1120, height: 700 });
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

  it(
    "on a phone: 360 px wide and touch, the key bar's Ctrl-C, a rotation, the network lost and back and a socket cut, each in the same shell, the offline page, installable",
    { timeout: 900_000 },
    async () => {
      const context = await browser!.newContext({
        viewport: { width: 360, height: 780 },
        deviceScaleFactor: 2,
        isMobile: true,
        hasTouch: true,
        userAgent:
          "Mozilla/5.0 (Linux; Android 15; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Mobile Safari/537.36",
      });
      const page = await context.newPage();
      const { pageErrors, policyViolations } = watched(page);
      const shot = (step: string) =>
        page.screenshot({ path: path.join(ARTIFACTS, `web-console-phone-${step}.png`) });
      const narrow = async (where: string) => {
        const { scrollWidth, innerWidth } = await fitsWidth(page);
        expect(scrollWidth, `${where}: ${scrollWidth} px of content in ${innerWidth} px`).toBeLessThanOrEqual(
          innerWidth,
        );
      };
      /** Inside the screen's width: what a thumb can reach without scrolling sideways. */
      const onScreen = async (what: string, locator: ReturnType<Page["locator"]>) => {
        const box = await locator.boundingBox();
        expect(box, what).not.toBeNull();
        expect(box!.x, what).toBeGreaterThanOrEqual(0);
        expect(box!.x + box!.width, what).toBeLessThanOrEqual(page.viewportSize()!.width);
      };

      await page.goto(`${base}/#/register`);
      await page.getByRole("heading", { name: "Create an account" }).waitFor();
      await narrow("sign-up");
      const email = `phone-${Date.now()}@example.test`;
      const password = "correct horse battery staple";
      await page.getByLabel("Email").fill(email);
      await page.getByLabel("Password").fill(password);
      await page.getByRole("button", { name: "Create account" }).tap();
      await page.getByRole("heading", { name: "Projects" }).waitFor();
      await shot("1-signed-up");

      await page.getByLabel("Project name").fill("phone test");
      await page.getByRole("button", { name: "Create project" }).tap();
      await onScreen("the key's download button", page.getByRole("button", { name: "Download key" }));
      await page.getByRole("button", { name: "I saved it" }).tap();
      const row = page.locator("tr[data-project-id]", { hasText: "phone test" });
      const projectId = (await row.getAttribute("data-project-id"))!;
      await row
        .getByTestId("status")
        .filter({ hasText: /^running$/ })
        .waitFor({ timeout: 240_000 });
      // The list at 360 px: one card per project, its name, status, operation and buttons all on screen.
      await narrow("the project list");
      await onScreen("the project's name", row.getByRole("link", { name: "phone test" }));
      await onScreen("its status", row.getByTestId("status"));
      await onScreen("its operation", row.getByTestId("operation"));
      for (const action of ["Stop", "Snapshot", "Delete"])
        await onScreen(`its ${action} button`, row.getByRole("button", { name: action }));
      await shot("2-projects");

      // The project's page: its facts and a snapshot taken from it, readable at that width.
      await row.getByRole("link", { name: "phone test" }).tap();
      await page.waitForURL(`${base}/#/projects/${projectId}`);
      const head = page.locator(".detail-head");
      await head.getByRole("button", { name: "Snapshot" }).tap();
      // A snapshot commits the sandbox and pushes it to the host's registry: minutes on a busy 2-core machine.
      await page.locator("table.snapshots tbody tr").first().waitFor({ timeout: 600_000 });
      await head
        .getByTestId("status")
        .filter({ hasText: /^running$/ })
        .waitFor({ timeout: 240_000 });
      await page.getByTestId("last-backup").filter({ hasNotText: "—" }).waitFor();
      await narrow("the project's page");
      for (const [what, locator] of [
        ["the status", head.getByTestId("status")],
        ["the Stop button", head.getByRole("button", { name: "Stop" })],
        ["the SSH command", page.getByTestId("ssh-command")],
        ["the last backup", page.getByTestId("last-backup")],
        ["the snapshot", page.locator("table.snapshots tbody tr").first()],
      ] as const)
        await onScreen(what, locator);

      // The terminal, with the key bar beneath it (a phone's keyboard has no Ctrl, Esc or arrows).
      await page.locator('.terminal-status[data-state="open"]').waitFor({ timeout: 60_000 });
      const keyBar = page.getByTestId("key-bar");
      expect(await keyBar.isVisible()).toBe(true);
      await onScreen("the key bar", keyBar);
      const portrait = await ptySize(page, "portrait");
      expect(portrait.cols, "columns on a 360 px screen").toBeGreaterThanOrEqual(40);
      await typeLine(page, "export PHONE_MARK=kept-$((6*7)); echo shell-$$-pid");
      const shell = (await untilScreen(page, /^shell-(\d+)-pid$/m))[1]!;
      await shot("3-terminal");

      // Ctrl from the bar, then c from the phone's keyboard: the running command gets SIGINT.
      await typeLine(
        page,
        "bash -c 'trap \"echo stopped-by-ctrl-c; exit 0\" INT; echo waiting-for-ctrl-c; sleep 600 & wait'",
      );
      await untilScreen(page, /^waiting-for-ctrl-c$/m);
      const ctrl = keyBar.getByRole("button", { name: /^Control/ });
      await ctrl.tap();
      expect(await ctrl.getAttribute("aria-pressed")).toBe("true");
      // Tapping the bar left the terminal focused (a phone keeps its keyboard up).
      expect(await page.evaluate(() => document.activeElement?.className ?? "")).toContain(
        "xterm-helper-textarea",
      );
      await page.keyboard.type("c");
      // The tty echoes the interrupt as ^C before the trap's line.
      await untilScreen(page, /^(\^C)?stopped-by-ctrl-c$/m);
      expect(await ctrl.getAttribute("aria-pressed")).toBe("false");
      // The bar's up arrow is the shell's history: the last line again.
      await typeLine(page, "echo again-$((2+3))");
      await untilScreen(page, /^again-5$/m);
      await keyBar.getByRole("button", { name: "Up arrow" }).tap();
      await page.keyboard.press("Enter");
      await waitFor("the line run again from the history", 30_000, async () =>
        (await screen(page)).filter((line) => line === "again-5").length >= 2 ? true : undefined,
      );
      await shot("4-ctrl-c");

      // Turned sideways: the terminal refits and the pty follows.
      await page.setViewportSize({ width: 780, height: 360 });
      let landscape = portrait;
      for (let attempt = 0; attempt < 10 && landscape.cols <= portrait.cols; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        landscape = await ptySize(page, `landscape${String.fromCharCode(97 + attempt)}`);
      }
      expect(landscape.cols).toBeGreaterThan(portrait.cols);
      expect(await keyBar.isVisible(), "the key bar on a touch screen turned sideways").toBe(true);
      await shot("5-landscape");
      await page.setViewportSize({ width: 360, height: 780 });

      // The terminal's sockets from here on pass through the test (each still the proxy's), so that one
      // can be cut on the way below.
      const routed: WebSocketRoute[] = [];
      await page.routeWebSocket(/\/terminal\//, (socket) => {
        socket.connectToServer();
        routed.push(socket);
      });

      // The network goes: the console says so; a page of it opened meanwhile gets the offline page.
      await context.setOffline(true);
      await page.locator('.terminal-status[data-state="offline"]').waitFor({ timeout: 10_000 });
      await shot("6-offline");
      const another = await context.newPage();
      await another.goto(base);
      await another.getByTestId("offline").waitFor({ timeout: 10_000 });
      await another.screenshot({ path: path.join(ARTIFACTS, "web-console-phone-7-offline-page.png") });
      await another.close();
      // And comes back: the terminal reconnects by itself, to the same tmux session and the same shell.
      await context.setOffline(false);
      await page.locator('.terminal-status[data-state="open"]').waitFor({ timeout: 30_000 });
      await typeLine(page, "echo back-$PHONE_MARK-shell-$$");
      await untilScreen(page, new RegExp(`^back-kept-42-shell-${shell}$`, "m"));
      await shot("8-back-online");

      // A socket lost on the way (its far end gone with 1001): the console says so, tries again by itself
      // after a second, and the new socket reaches the same shell.
      expect(routed).toHaveLength(1);
      await routed[0]!.close({ code: 1001, reason: "cut by the test" });
      await page
        .getByTestId("terminal-closed")
        .filter({ hasText: /^disconnected: 1001 .*; trying again in \d+ s$/ })
        .waitFor({ timeout: 10_000 });
      await page.locator('.terminal-status[data-state="open"]').waitFor({ timeout: 30_000 });
      expect(routed).toHaveLength(2);
      await typeLine(page, "echo retried-$PHONE_MARK-shell-$$");
      await untilScreen(page, new RegExp(`^retried-kept-42-shell-${shell}$`, "m"));

      // Installable, in Chromium's own verdict (of a profile on disk: an incognito context, as this one is,
      // never is), and Lighthouse on the project list and the project's page, as this user on a phone.
      const { manifest, installabilityErrors, runs } = await lighthouseRuns(email, password, [
        `${base}/#/projects`,
        `${base}/#/projects/${projectId}`,
      ]);
      expect(manifest.errors).toEqual([]);
      expect(manifest.url).toBe(`${base}/manifest.webmanifest`);
      expect(installabilityErrors).toEqual([]);
      for (const run of runs) {
        console.log(
          `lighthouse ${run.url}: ${JSON.stringify(run.scores)}; losing points: ${run.failing.join("; ") || "none"}`,
        );
        for (const [category, floor] of Object.entries(LIGHTHOUSE_FLOOR))
          expect(
            run.scores[category],
            `${category} on ${run.url}: ${run.failing.join("; ")}`,
          ).toBeGreaterThanOrEqual(floor);
      }

      await head.getByRole("button", { name: "Delete" }).tap();
      await waitFor("the tenant's resources to be gone", 240_000, async () =>
        (await leftovers(projectId)).length === 0 ? true : undefined,
      );
      expect(pageErrors).toEqual([]);
      expect(policyViolations).toEqual([]);
      await context.close();
    },
  );
});
