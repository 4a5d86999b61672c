import { existsSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import * as path from "node:path";
import fastifyStatic from "@fastify/static";
import type { FastifyInstance } from "fastify";
import { REPO_ROOT } from "../../lib/toolchain.js";

/** Where `npm run build:web` (web/vite.config.ts) writes the console. */
export const WEB_CONSOLE_ROOT = path.join(REPO_ROOT, "dist", "web");

export interface WebConsoleOptions {
  /** The console's build: index.html and the content-hashed assets/ next to it. */
  readonly root: string;
  /**
   * Origins of `terminal_url` (e.g. `ws://203.0.113.7:9000`): the page may open WebSockets to them, and
   * to nothing but its own origin otherwise.
   */
  readonly terminalOrigins?: readonly string[];
}

/** Vite names every asset by its content hash, so an asset URL never changes meaning. */
const ASSET_MAX_AGE = "365d";

/**
 * The installable console's files (web/public): at fixed URLs, so never cached without asking again
 * (`no-cache`), each with its type. The service worker must be served from `/` for its scope to be the
 * whole console.
 */
export const PUBLIC_FILES: Readonly<Record<string, string>> = {
  "manifest.webmanifest": "application/manifest+json",
  "sw.js": "text/javascript; charset=utf-8",
  "offline.html": "text/html; charset=utf-8",
  "offline.js": "text/javascript; charset=utf-8",
  "icons/icon.svg": "image/svg+xml",
  "icons/icon-192.png": "image/png",
  "icons/icon-512.png": "image/png",
  "icons/icon-maskable-512.png": "image/png",
};

function terminalOrigin(origin: string): string {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    throw new Error(`web console: terminal origin ${JSON.stringify(origin)} is not a URL`);
  }
  if ((url.protocol !== "ws:" && url.protocol !== "wss:") || url.pathname !== "/" || url.search || url.hash)
    throw new Error(
      `web console: terminal origin ${JSON.stringify(origin)} must be a ws:// or wss:// origin (scheme, host, port)`,
    );
  return url.origin;
}

/**
 * The console's policy: its own scripts and styles only (xterm.js writes its theme into a <style>
 * element, hence 'unsafe-inline' for styles and nothing else), API calls to its own origin, WebSockets
 * to the terminal proxy, never framed (clickjacking a terminal would be typing into a sandbox).
 */
export function contentSecurityPolicy(terminalOrigins: readonly string[] = []): string {
  const connect = ["'self'", ...terminalOrigins.map(terminalOrigin)];
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    "manifest-src 'self'",
    "worker-src 'self'",
    `connect-src ${connect.join(" ")}`,
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "object-src 'none'",
  ].join("; ");
}

/**
 * Serves the web console: `/` is index.html (never cached: it names the current assets),
 * `/assets/*` the hashed assets (cached for good) and PUBLIC_FILES by name (the manifest, the service
 * worker, the offline page, the icons). Nothing else is claimed, so the API's routes
 * (/auth/*, /projects*, /healthz, /metrics, /openapi.json) and its 404s are untouched; the console
 * routes with the URL's hash (#/projects/<id>), which never reaches the server.
 * Throws when the console is not built: a start-up error, not a 404 at the first visit.
 */
export function registerWebConsole(app: FastifyInstance, options: WebConsoleOptions): void {
  const root = path.resolve(options.root);
  const assets = path.join(root, "assets");
  const missing = [
    ...["index.html", ...Object.keys(PUBLIC_FILES)].filter((file) => !existsSync(path.join(root, file))),
    ...(statSync(assets, { throwIfNoEntry: false })?.isDirectory() ? [] : ["assets/"]),
  ];
  if (missing.length > 0)
    throw new Error(
      `the web console is not built: ${missing.map((file) => path.join(root, file)).join(", ")} missing; run 'npm run build:web'`,
    );
  const policy = contentSecurityPolicy(options.terminalOrigins);

  // Encapsulated: the headers below are the console's, not the API's.
  void app.register(async (scope) => {
    scope.addHook("onSend", async (_request, reply, payload) => {
      void reply.header("content-security-policy", policy);
      void reply.header("x-content-type-options", "nosniff");
      void reply.header("x-frame-options", "DENY");
      void reply.header("referrer-policy", "no-referrer");
      void reply.header("cross-origin-opener-policy", "same-origin");
      return payload;
    });
    await scope.register(fastifyStatic, {
      root: assets,
      prefix: "/assets/",
      index: false,
      list: false,
      redirect: false,
      dotfiles: "deny",
      maxAge: ASSET_MAX_AGE,
      immutable: true,
    });
    scope.get("/", (_request, reply) =>
      reply
        .header("cache-control", "no-cache")
        .sendFile("index.html", root, { cacheControl: false, maxAge: 0, immutable: false }),
    );
    // Small files, read at each request (a rebuilt console is served without a restart), with the type
    // given here: the static sender's guess for a worker is not the one browsers document.
    for (const [file, type] of Object.entries(PUBLIC_FILES))
      scope.get(`/${file}`, async (_request, reply) =>
        reply
          .type(type)
          .header("cache-control", "no-cache")
          .send(await readFile(path.join(root, file))),
      );
  });
}
