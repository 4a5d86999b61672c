import { mkdtempSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contentSecurityPolicy, PUBLIC_FILES, registerWebConsole } from "../../runtime/api/web-console.js";
import type { Database } from "../../runtime/store/db.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { apiServer } from "../helpers/api.js";

// No request below reaches the database: the API routes answer 401/400 before any query.
const server = () => apiServer({ db: {} as Database });
const INDEX = '<!doctype html><script type="module" src="/assets/index-Ab12Cd34.js"></script>';
const SCRIPT = "console.log('console');";

let scratch: string;
let root: string;

beforeAll(() => {
  scratch = mkdtempSync(path.join(os.tmpdir(), "web-console-"));
  root = path.join(scratch, "web");
  mkdirSync(path.join(root, "assets"), { recursive: true });
  writeFileSync(path.join(root, "index.html"), INDEX);
  writeFileSync(path.join(root, "assets", "index-Ab12Cd34.js"), SCRIPT);
  writeFileSync(path.join(root, "assets", "index-Ef56Gh78.css"), "body{}");
  writeFileSync(path.join(root, "assets", ".secret"), "not for the web");
  mkdirSync(path.join(root, "icons"));
  for (const file of Object.keys(PUBLIC_FILES)) writeFileSync(path.join(root, file), `the file ${file}`);
  // Outside the served directory: a traversal must not reach it.
  writeFileSync(path.join(scratch, "outside.txt"), "OUTSIDE-CONTENT");
});

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("the web console", () => {
  it("serves index.html at / uncached, with a policy that lets it reach only the API and the terminal", async () => {
    const app = server();
    registerWebConsole(app, { root, terminalOrigins: ["ws://127.0.0.1:9000"] });
    const response = await app.inject({ method: "GET", url: "/" });
    expect(response.statusCode).toBe(200);
    expect(response.headers["content-type"]).toMatch(/^text\/html/);
    expect(response.body).toBe(INDEX);
    expect(response.headers["cache-control"]).toBe("no-cache");
    expect(response.headers["x-content-type-options"]).toBe("nosniff");
    expect(response.headers["x-frame-options"]).toBe("DENY");
    const csp = String(response.headers["content-security-policy"]);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self' ws://127.0.0.1:9000;");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toMatch(/script-src[^;]*unsafe/);
    await app.close();
  });

  it("serves hashed assets as immutable, and nothing outside assets/", async () => {
    const app = server();
    registerWebConsole(app, { root });
    const script = await app.inject({ method: "GET", url: "/assets/index-Ab12Cd34.js" });
    expect(script.statusCode).toBe(200);
    expect(script.headers["content-type"]).toMatch(/javascript/);
    expect(script.body).toBe(SCRIPT);
    expect(script.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(script.headers["x-content-type-options"]).toBe("nosniff");
    const css = await app.inject({ method: "GET", url: "/assets/index-Ef56Gh78.css" });
    expect(css.headers["content-type"]).toMatch(/^text\/css/);

    for (const url of [
      "/assets/missing.js",
      "/assets/.secret",
      "/assets/../outside.txt",
      "/assets/%2e%2e/outside.txt",
      "/assets/..%2f..%2foutside.txt",
      "/assets/",
      "/index.html",
    ]) {
      const response = await app.inject({ method: "GET", url });
      expect([403, 404], url).toContain(response.statusCode);
      expect(response.body, url).not.toContain("OUTSIDE-CONTENT");
      expect(response.body, url).not.toContain("not for the web");
    }
    await app.close();
  });

  it("serves the installable console's files by name, each with its type, asking again every time", async () => {
    const app = server();
    registerWebConsole(app, { root });
    const types: Record<string, RegExp> = {
      "/manifest.webmanifest": /^application\/manifest\+json/,
      "/sw.js": /^text\/javascript/,
      "/offline.html": /^text\/html/,
      "/offline.js": /^text\/javascript/,
      "/icons/icon.svg": /^image\/svg\+xml/,
      "/icons/icon-192.png": /^image\/png/,
      "/icons/icon-512.png": /^image\/png/,
      "/icons/icon-maskable-512.png": /^image\/png/,
    };
    expect(Object.keys(types).sort()).toEqual(
      Object.keys(PUBLIC_FILES)
        .map((file) => `/${file}`)
        .sort(),
    );
    // What web/public holds is what is served by name: a file added there without its entry would be a
    // 404 in the built console, one listed without its file a console that refuses to start.
    const publicDir = path.join(REPO_ROOT, "web", "public");
    const inPublic = readdirSync(publicDir, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => path.relative(publicDir, path.join(entry.parentPath, entry.name)));
    expect(inPublic.sort()).toEqual(Object.keys(PUBLIC_FILES).sort());
    for (const [url, type] of Object.entries(types)) {
      const response = await app.inject({ method: "GET", url });
      expect(response.statusCode, url).toBe(200);
      expect(response.headers["content-type"], url).toMatch(type);
      expect(response.body, url).toBe(`the file ${url.slice(1)}`);
      // A fixed URL: a new build's worker or manifest reaches the browser at its next visit.
      expect(response.headers["cache-control"], url).toBe("no-cache");
      expect(response.headers["x-content-type-options"], url).toBe("nosniff");
    }
    // The page may load its manifest and its worker from its own origin, and from nowhere else.
    const csp = String((await app.inject({ method: "GET", url: "/" })).headers["content-security-policy"]);
    expect(csp).toContain("manifest-src 'self';");
    expect(csp).toContain("worker-src 'self';");
    // Nothing else in the build's root is served by name.
    for (const url of ["/icons/", "/icons/other.png", "/sw.js.map", "/manifest.json"])
      expect([403, 404], url).toContain((await app.inject({ method: "GET", url })).statusCode);
    await app.close();
  });

  it("does not shadow the API: its routes, errors and 404s answer as before, without the console's headers", async () => {
    const app = server();
    registerWebConsole(app, { root, terminalOrigins: ["ws://127.0.0.1:9000"] });
    const health = await app.inject({ method: "GET", url: "/healthz" });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toMatchObject({ status: "ready" });
    expect(health.headers["content-security-policy"]).toBeUndefined();

    const openapi = await app.inject({ method: "GET", url: "/openapi.json" });
    expect(openapi.json()).toMatchObject({ openapi: "3.1.0" });

    // /metrics needs the database (none here): what matters is that the API answers it, not the console.
    const metrics = await app.inject({ method: "GET", url: "/metrics" });
    expect(metrics.body).not.toBe(INDEX);
    expect(metrics.headers["content-security-policy"]).toBeUndefined();

    const projects = await app.inject({ method: "GET", url: "/projects" });
    expect(projects.statusCode).toBe(401);
    expect(projects.json()).toMatchObject({ error: expect.any(String), message: expect.any(String) });

    const login = await app.inject({ method: "POST", url: "/auth/login", payload: { email: "x" } });
    expect(login.statusCode).toBe(400);
    expect(login.json()).toMatchObject({ error: "validation_failed" });

    const unknown = await app.inject({ method: "GET", url: "/projects/not-a-route/at-all" });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.body).not.toContain("<!doctype html>");
    await app.close();
  });

  it("refuses to start without a build, saying how to make one", () => {
    const empty = mkdtempSync(path.join(os.tmpdir(), "web-console-empty-"));
    try {
      expect(() => registerWebConsole(server(), { root: empty })).toThrow(/npm run build:web/);
      writeFileSync(path.join(empty, "index.html"), INDEX); // index without its assets: still not a build
      expect(() => registerWebConsole(server(), { root: empty })).toThrow(/assets\/ missing/);
      // A build from before the console was installable (no manifest, no worker) is named as such.
      mkdirSync(path.join(empty, "assets"));
      expect(() => registerWebConsole(server(), { root: empty })).toThrow(/manifest\.webmanifest, .*sw\.js/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it("accepts only ws:// and wss:// origins for the terminal", () => {
    expect(contentSecurityPolicy(["ws://[::1]:9000", "wss://Sandbox.Example.com"])).toContain(
      "connect-src 'self' ws://[::1]:9000 wss://sandbox.example.com;",
    );
    expect(contentSecurityPolicy()).toContain("connect-src 'self';");
    for (const bad of ["http://127.0.0.1:9000", "ws://127.0.0.1:9000/terminal", "*", "ws://h:9000?x=1"])
      expect(() => contentSecurityPolicy([bad]), bad).toThrow(/terminal origin/);
    expect(() => registerWebConsole(server(), { root, terminalOrigins: ["ws://h;script-src *"] })).toThrow(
      /terminal origin/,
    );
  });
});
