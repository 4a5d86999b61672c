// The bundles the platform runs from this checkout (esbuild; node_modules stay external, beside them): the
// provider plugins (dist/plugins/*.mjs, which bin/pulumi-resource-* run) and the runtime service
// (dist/runtime/main.mjs: `npm run local`, the GCP host's unit, the runtimes the tests and benches start). A
// bundle starts without a TypeScript loader in the process (tsx's costs the runtime 34 MiB of resident memory,
// measured in session 34) and without compiling two hundred modules at each start. Each file is written only
// when its text changed, and by rename, so a process starting meanwhile never reads half of one.
// `node --import tsx scripts/bundles.ts` builds them all (`npm run setup` does).
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import * as path from "node:path";
import { build, type BuildOptions } from "esbuild";
import { REPO_ROOT } from "../lib/toolchain.js";

/** The runtime's bundle; its source map beside it (`node --enable-source-maps` reads it for stack traces). */
export const RUNTIME_BUNDLE = path.join(REPO_ROOT, "dist", "runtime", "main.mjs");

/** How the runtime's bundle is started: Node.js with stack traces that name the TypeScript sources. */
export const RUNTIME_ARGV = ["--enable-source-maps", RUNTIME_BUNDLE];

/**
 * The service's own bundle, which the entry imports once the SDK's closure serializer is deferred
 * (runtime/start.ts); started directly, it loads the SDK whole (the fleet bench's baseline).
 */
export const RUNTIME_APP_BUNDLE = path.join(REPO_ROOT, "dist", "runtime", "app.mjs");

const COMMON: BuildOptions = {
  absWorkingDir: REPO_ROOT,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  logLevel: "warning",
  write: false,
};

const BUNDLES = {
  plugins: {
    ...COMMON,
    entryPoints: { sandbox: "provider/main-sandbox.ts", command: "provider/main-command.ts" },
    outdir: "dist/plugins",
    sourcemap: "inline",
  },
  // The map apart and without the sources' text: the runtime keeps what it loads for its whole life. The entry
  // (main) defers the SDK's closure serializer, then imports the service (app): runtime/start.ts.
  runtime: {
    ...COMMON,
    entryPoints: { main: "runtime/start.ts", app: "runtime/main.ts" },
    outdir: "dist/runtime",
    sourcemap: "external",
    sourcesContent: false,
  },
  // Split, so what one command alone needs (the MCP SDK and zod, for `sbx mcp`) is a chunk loaded when that
  // command runs, not at every start. No map: the CLI's errors are messages, not stack traces.
  cli: {
    ...COMMON,
    entryPoints: { sbx: "cli/main.ts" },
    outdir: "dist/cli",
    splitting: true,
    chunkNames: "chunk-[hash]",
    metafile: true,
  },
} satisfies Record<string, BuildOptions>;

/**
 * The folders bin/sbx looks in for a source newer than the CLI's bundle (it then runs the sources with tsx):
 * every module the bundle holds must lie in one of them, or an edit there would go unseen.
 */
export const CLI_SOURCE_DIRS = ["cli", "lib", "mcp", "sdk/src"] as const;

/**
 * The CLI's only where its sources are: the GCP host's release (components/gcp/runtime-release.ts) carries the
 * runtime without the developer's CLI, and its set-up runs this file too.
 */
const DEFAULT_BUNDLES: readonly (keyof typeof BUNDLES)[] = existsSync(path.join(REPO_ROOT, "cli", "main.ts"))
  ? ["plugins", "runtime", "cli"]
  : ["plugins", "runtime"];

/** Builds the bundles named (all of them by default); answers the files it wrote (unchanged ones are not). */
export async function buildBundles(
  names: readonly (keyof typeof BUNDLES)[] = DEFAULT_BUNDLES,
): Promise<string[]> {
  const written: string[] = [];
  for (const name of names) {
    const { outputFiles, metafile } = await build(BUNDLES[name]);
    if (name === "cli") {
      const outside = Object.keys(metafile?.inputs ?? {}).filter(
        (input) => !CLI_SOURCE_DIRS.some((dir) => input.startsWith(`${dir}/`)),
      );
      if (outside.length > 0)
        throw new Error(
          `the sbx bundle holds modules outside ${CLI_SOURCE_DIRS.join(", ")} (bin/sbx would not see them change): ${outside.join(", ")}`,
        );
    }
    for (const file of outputFiles ?? []) {
      let current: Buffer | undefined;
      try {
        current = readFileSync(file.path);
      } catch {
        // not built yet
      }
      if (current?.equals(file.contents)) continue;
      mkdirSync(path.dirname(file.path), { recursive: true });
      const partial = `${file.path}.${process.pid}.partial`;
      writeFileSync(partial, file.contents);
      renameSync(partial, file.path);
      written.push(path.relative(REPO_ROOT, file.path));
    }
    if (name === "cli") {
      // A chunk of an earlier build is nobody's now; and the entry is touched even when unchanged, since
      // bin/sbx compares its time with the sources' (an edit that changes no output would otherwise leave
      // every later start on tsx).
      const outdir = path.join(REPO_ROOT, BUNDLES.cli.outdir);
      const current = new Set((outputFiles ?? []).map((file) => path.basename(file.path)));
      for (const entry of readdirSync(outdir))
        if (!current.has(entry)) rmSync(path.join(outdir, entry), { force: true });
      const now = new Date();
      utimesSync(path.join(outdir, "sbx.mjs"), now, now);
    }
  }
  return written;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const started = Date.now();
  const written = await buildBundles();
  console.log(
    `bundles built in ${Date.now() - started} ms: ${written.length > 0 ? written.join(", ") : "none changed"}`,
  );
}
